#!/usr/bin/env bash
# Second real-GPU run: the cap with caching on, reuse safety on a side stream, model-swap pressure.
set -uo pipefail
cd "$(dirname "$0")/../.."
lib=$PWD/target/release/librocmguard.so
echo "== cap 8GiB (caching on)"; LD_PRELOAD=$lib ROCMGUARD_VRAM_LIMIT=8GiB python3 tests/gpu/smoke.py cap 2>&1 | grep -v WARN | tail -6
echo "== reuse, native, caching ON (the hazard is real: PyTorch needs record_stream here)"; python3 tests/gpu/smoke.py reuse 2>&1 | tail -1
echo "== reuse, native, caching off (cudaFree synchronizes)"; PYTORCH_NO_CUDA_MEMORY_CACHING=1 python3 tests/gpu/smoke.py reuse 2>&1 | tail -1
echo "== reuse, rocmguard, caching off"; PYTORCH_NO_CUDA_MEMORY_CACHING=1 LD_PRELOAD=$lib python3 tests/gpu/smoke.py reuse 2>&1 | tail -1
echo "== swap, native caching"; python3 tests/gpu/smoke.py swap > /tmp/swap.txt 2>&1; cat /tmp/swap.txt | tail -3
alloc=$(awk '/max_allocated/{print $2}' /tmp/swap.txt); resv=$(awk '/max_reserved/{print $2}' /tmp/swap.txt)
cap=$(python3 -c "a,r=$alloc,$resv; print(int(max(1.05*a, 0.9*r)))")
echo "== swap, rocmguard, caching off, cap $cap bytes (below PyTorch's peak reserved $resv)"
PYTORCH_NO_CUDA_MEMORY_CACHING=1 LD_PRELOAD=$lib ROCMGUARD_VRAM_LIMIT=$cap ROCMGUARD_STATS=1 python3 tests/gpu/smoke.py swap 2>&1 | grep -v "^ WARN" | tail -5
