#!/usr/bin/env bash
# rocmguard on a real NVIDIA GPU under real PyTorch: one command for the checks that
# docs/gpu-check.md describes. Each check is an unmodified PyTorch program (scripts/gpu/*.py)
# run as its own process with and without LD_PRELOAD=librocmguard.so; scripts/gpu/driver.py
# compares the runs, prints a table of figures and writes the same as JSON to
# $OUT/gpu-check.json (./gpu-check.json without $OUT), each run's output beside it.
#
# Usage: scripts/gpu-check.sh [--lib PATH_TO_librocmguard.so] [--quick] [driver options]
#   --lib    the shim to test (default target/release/librocmguard.so)
#   --quick  fewer steps and iterations: about 3 minutes instead of about 8 on an H100
# Other options go to the driver as they are (--only 1,4  --budget SECONDS  --json PATH  --set vmm=0).
# Exit status: 0 when every check passed or was skipped, 1 when one failed, 2 when it could
# not start.
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
            sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
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
