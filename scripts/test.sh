#!/usr/bin/env bash
# The whole test suite (the README's second command). On a fresh Debian machine it installs what
# the tests need first: the real ROCm 5.2 HIP library and headers (the shim is tested in front of
# it), Debian's rustc 1.63 (the core's minimum), and through scripts/windows-test.sh the mingw
# cross toolchain and wine64.
set -euo pipefail
cd "$(dirname "$0")/.."

packages="gcc python3 python3-venv libamdhip64-5 libamdhip64-dev rustc cargo librust-once-cell-dev"
missing=""
for p in $packages; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "test: installing$missing"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing >/dev/null
fi

# The tree's own rules (a clone alone passes: nothing reads the shared folder beside the
# checkout; no source shared as text; no file over 700 lines; every unsafe block says why it is
# sound): scripts/source_rules.py.
python3 scripts/source_rules.py
cargo fmt --all --check
(cd windows && cargo fmt --all --check)
cargo clippy --workspace --all-targets --release -- -D warnings
cargo build --workspace --release
# The test stages all run, each one's output kept to count its tests; the last line is the
# verdict, `N passed, N failed` (scripts/verdict.sh says how it counts; scripts/stages.sh runs
# the stages in a temporary folder of their own and checks it is left empty).
. scripts/stages.sh
stages_begin
stage 1-cargo cargo test --workspace --release --no-fail-fast
# The wheel and the from-source install, as a user gets them (fresh venv, pip --no-index).
stage 1-wheel scripts/wheel-test.sh
# PyPI's hip-python and rocm-bindings-hip, installed with pip, on hipsim under the shim.
stage 1-pypi scripts/pypi-clients.sh
# The GPU check's driver (scripts/gpu-check.sh) judged against fake runs; its tests that need
# PyTorch skip without it.
stage 2-python python3 scripts/gpu/test_driver.py
# corpus_summary.py's --capacity, the measure of a cap a program fits in, over the whole corpus.
stage 2-corpus python3 scripts/test_corpus_summary.py
stage 3-msrv scripts/core-msrv.sh
stage 4-windows scripts/windows-test.sh
# A tidy guest: nothing left in the temporary directory.
stage 5-tidy tidy
scripts/verdict.sh "$logs"
