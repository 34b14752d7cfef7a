#!/usr/bin/env bash
# The main job (README): builds everything, then replays a real PyTorch training run's
# allocations (ResNet-50, data/traces/resnet_train.csv.gz) as real hipMalloc/hipFree calls
# of an unmodified C program on hipsim, the SIMULATED HIP runtime (no AMD GPU needed), first
# bare and then under librocmguard.so with a cap and injected transient out-of-memory faults,
# and prints what rocmguard did.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
trace=${1:-$root/data/traces/resnet_train.csv.gz}
[ -f "$trace" ] || { echo "demo: no trace at $trace (give one as the first argument)" >&2; exit 2; }

# The first build takes minutes: cargo's own progress shows it is working.
echo "demo: building rocmguard, hipsim and the trace player (cargo build --release)..."
cargo build --release
rel=$root/target/release
lib=$rel/hipsim-lib
mkdir -p "$lib"
ln -sf "$rel/libamdhip64.so" "$lib/libamdhip64.so.6"
ln -sf "$rel/libamdhip64.so" "$lib/libamdhip64.so"
cc -O2 -o "$rel/trace_player" examples/trace_player.c -L"$lib" -lamdhip64 -ldl

play() { zcat -f "$trace" | LD_LIBRARY_PATH=$lib "$@" "$rel/trace_player"; }
export HIPSIM_VRAM=16GiB HIPSIM_FAIL_PROB=0.02 HIPSIM_SEED=7

echo "== $(basename "$trace") on hipsim (simulated 16 GiB device), 2% of device allocations fail at random"
echo "-- without rocmguard: every tensor is a hipMalloc, and every injected failure reaches the program"
play env || true
echo
echo "-- with rocmguard: LD_PRELOAD=librocmguard.so, cap 4 GiB, stats at exit"
play env LD_PRELOAD="$rel/librocmguard.so" ROCMGUARD_VRAM_LIMIT=4GiB ROCMGUARD_STATS=1
echo
echo "rocmguard served the program from 2 MiB-aligned segments: compare 'dev-allocs' with the"
echo "hipMalloc count above, 'peak resvd' with the peak live bytes, and 'retries' with the faults."
