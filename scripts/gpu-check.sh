#!/usr/bin/env bash
# rocmguard on a real NVIDIA GPU under real PyTorch (docs/gpu-check.md). Each check is an
# unmodified PyTorch program (scripts/gpu/*.py) run with and without LD_PRELOAD=librocmguard.so;
# scripts/gpu/driver.py compares the runs and prints a table per part, each with its own verdict.
#
# Usage: scripts/gpu-check.sh [--lib PATH_TO_librocmguard.so] [--part N | --quick] [driver options]
#   --part N  one part, within one 10-minute device call (at most --budget s, default 540):
#             1 cap, reuse, swapping under a cap, paths around the pool, two GPUs
#             2 training across processes (losses, memory; step times as information), bound
#             3, 4, 5 step time in one process (pooled / paused): GPT-2, ResNet-50, decode
#   --quick   parts 1 and 2 smaller, in one call; no step-time verdict
#   (neither) all five parts in turn, each its own table (about 40 minutes)
# Other options go to the driver: --only 1,4  --budget SECONDS  --out DIR  --set vmm=0.
# Exit status: 0 PASS, 1 a row failed or a part ran out of time, 2 could not start, 3 nothing
# failed but an in-process step-time row is UNRESOLVED.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"

lib="$repo/target/release/librocmguard.so"
rest=()
while [ $# -gt 0 ]; do
    case "$1" in
        --lib)
            [ $# -ge 2 ] || { echo "gpu-check: --lib needs a path" >&2; exit 2; }
            lib="$2"
            shift 2
            ;;
        --lib=*)
            lib="${1#--lib=}"
            shift
            ;;
        -h|--help)
            sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *)
            rest+=("$1")
            shift
            ;;
    esac
done

if [ ! -f "$lib" ]; then
    echo "gpu-check: $lib not found; build it with \`cargo build --release\` (or pass --lib)" >&2
    exit 2
fi
if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpu-check: no nvidia-smi here; this needs a machine with an NVIDIA GPU" >&2
    exit 2
fi
python="${PYTHON:-python3}"
if ! "$python" -c 'import torch' >/dev/null 2>&1; then
    echo "gpu-check: $python cannot import torch" >&2
    exit 2
fi

exec "$python" "$repo/scripts/gpu/driver.py" --lib "$lib" ${rest[@]+"${rest[@]}"}
