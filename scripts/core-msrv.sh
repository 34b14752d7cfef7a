#!/usr/bin/env bash
# Builds and tests the core crate (shim/core) with Debian 12's rustc 1.63, the toolchain that
# distributions and the Windows cross build use. The core has no dependencies, so nothing needs
# vendoring; it is built from a copy outside the workspace because the old cargo would parse
# every manifest of the workspace above it.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x /usr/bin/cargo ] && [ -x /usr/bin/rustc ] || {
    echo "core-msrv: Debian's rustc and cargo are missing (apt-get install rustc cargo)" >&2
    exit 1
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Same layout as here: the core's unit tests read the fake machines in tests/fixtures.
mkdir -p "$work/shim" "$work/tests"
cp -r shim/core "$work/shim/core"
cp -r tests/fixtures "$work/tests/fixtures"
# The workspace-inherited keys, spelled out for a standalone manifest.
sed -i -e 's/^version.workspace = true/version = "0.1.0"/' \
    -e 's/^license.workspace = true/license = "MIT OR Apache-2.0"/' "$work/shim/core/Cargo.toml"
cd "$work/shim/core"
echo "core-msrv: $(/usr/bin/rustc --version)"
RUSTC=/usr/bin/rustc /usr/bin/cargo build --offline --quiet
RUSTC=/usr/bin/rustc /usr/bin/cargo test --offline --lib 2>&1 | grep "test result"
