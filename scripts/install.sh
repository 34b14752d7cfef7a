#!/usr/bin/env bash
# Installs rocmguard from this checkout: PREFIX/bin/rocmguard and PREFIX/lib/librocmguard.so
# (the `../lib` beside the command, where `rocmguard run` looks), and hipsim, the simulated
# runtime, as PREFIX/lib/rocmguard-hipsim/lib/libamdhip64.so (for `rocmguard run --sim`).
# PREFIX defaults to ~/.local.
#   scripts/install.sh [PREFIX]
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${1:-$HOME/.local}
cargo build --release -q -p rocmguard-preload -p rocmguard-cli -p hipsim
install -D -m 755 target/release/rocmguard "$prefix/bin/rocmguard"
install -D -m 755 target/release/librocmguard.so "$prefix/lib/librocmguard.so"
install -D -m 755 target/release/libamdhip64.so "$prefix/lib/rocmguard-hipsim/lib/libamdhip64.so"
echo "installed $prefix/bin/rocmguard and $prefix/lib/librocmguard.so"
case ":$PATH:" in *":$prefix/bin:"*) ;; *) echo "add $prefix/bin to PATH to run \`rocmguard\`" ;; esac
