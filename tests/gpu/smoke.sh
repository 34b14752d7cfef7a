#!/usr/bin/env bash
# Quick real-GPU run of the CUDA face (see tests/gpu/smoke.py); writes logs to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
lib=$PWD/target/release/librocmguard.so
out=${OUT:-/tmp}
nvidia-smi -L; python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"
echo "== cap 8GiB"; LD_PRELOAD=$lib ROCMGUARD_VRAM_LIMIT=8GiB python3 tests/gpu/smoke.py cap 2>&1 | tail -8
echo "== cap 8GiB, caching off"; PYTORCH_NO_CUDA_MEMORY_CACHING=1 LD_PRELOAD=$lib ROCMGUARD_VRAM_LIMIT=8GiB python3 tests/gpu/smoke.py cap 2>&1 | tail -8
export CUBLAS_WORKSPACE_CONFIG=:4096:8
echo "== gpt2 native caching"; python3 tests/gpu/smoke.py gpt2 > $out/native.txt 2>&1; tail -3 $out/native.txt
echo "== gpt2 shim caching on"; LD_PRELOAD=$lib ROCMGUARD_STATS=1 python3 tests/gpu/smoke.py gpt2 > $out/shim_on.txt 2>&1; tail -8 $out/shim_on.txt
echo "== gpt2 native no-caching"; PYTORCH_NO_CUDA_MEMORY_CACHING=1 python3 tests/gpu/smoke.py gpt2 > $out/native_off.txt 2>&1; tail -3 $out/native_off.txt
echo "== gpt2 shim caching off"; PYTORCH_NO_CUDA_MEMORY_CACHING=1 LD_PRELOAD=$lib ROCMGUARD_STATS=1 python3 tests/gpu/smoke.py gpt2 > $out/shim_off.txt 2>&1; tail -8 $out/shim_off.txt
for f in shim_on native_off shim_off; do
  if diff <(grep ^loss $out/native.txt) <(grep ^loss $out/$f.txt) >/dev/null; then echo "losses $f identical to native"; else echo "losses $f DIFFER"; fi
done
