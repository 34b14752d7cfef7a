#!/usr/bin/env bash
# Real third-party clients: PyPI's `hip-python` (7.2) and `rocm-bindings-hip` (10.0), which load
# the HIP runtime themselves, installed with pip into a venv of their own (target/pypi-venv) and
# run (tests/pypi/client.py) on hipsim under the shim with a 1 GiB cap, twice: with
# `rocmguard run --sim` (the simulator preloaded), and as on a ROCm machine, where the runtime is
# first loaded by the bindings' own dlopen (`rocmguard run` with only LD_LIBRARY_PATH and
# ROCM_PATH pointing at the simulator). Each time: an allocation over the cap is refused with
# hipErrorOutOfMemory, hipMemGetInfo reports the capped view, a pooled block round-trips
# through hipMemcpy, the program exits 0. A package that cannot be installed fails its checks
# (never a quiet skip). One line per check, then `N passed, N failed`. Needs `cargo build
# --release` first (scripts/test.sh does it).
set -uo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
cli=target/release/rocmguard
venv=target/pypi-venv
cap=$((1 << 30))
passed=0
failed=0
check() { # check WHAT OK?
    if [ "$2" = 1 ]; then
        echo "pypi: ok: $1"
        passed=$((passed + 1))
    else
        echo "pypi: FAIL: $1"
        failed=$((failed + 1))
    fi
}

# What one run printed ($out, exit status $rc), judged.
judge() {
    local label=$1 row hits
    seen() { echo "$out" | sed -n "s/^$1 //p" | head -1; }
    # The guard's table at exit: its last columns are allocs hits dev-allocs dev-frees trims
    # retries ooms syncs dev-ms sync-ms.
    row=$(echo "$out" | grep '^dev0 ' | tail -1)
    hits=$(echo "$row" | awk 'NF > 9 { print $(NF - 8) }')
    check "$label: twice the cap refused with $(seen over_cap)" \
        "$([ "$(seen over_cap)" = hipErrorOutOfMemory ] && echo 1)"
    check "$label: hipMemGetInfo total $(seen total), free $(seen free) (cap $cap)" \
        "$([ "$(seen total)" = "$cap" ] && [ -n "$(seen free)" ] && [ "$(seen free)" -le "$cap" ] && echo 1)"
    check "$label: 4 KiB through hipMemcpy and back: $(seen roundtrip0), again from the pool: $(seen roundtrip1) (pool hits ${hits:-none})" \
        "$([ "$(seen roundtrip0)" = intact ] && [ "$(seen roundtrip1)" = intact ] && [ "${hits:-0}" -ge 1 ] && echo 1)"
    check "$label: exit status $rc" "$([ "$rc" = 0 ] && echo 1)"
    [ "$rc" = 0 ] || echo "$out" | tail -20 | sed 's/^/    /'
}

# The simulator's ROCm-like root, as --sim makes and names it.
sim=$("$cli" run --quiet --sim --dry-run -- true | sed -n 's/^ROCM_PATH=//p')
[ -f "$sim/lib/libamdhip64.so" ] || { echo "pypi: FAIL: no simulator from '$cli run --sim'"; echo "0 passed, 1 failed"; exit 1; }
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv" || { rm -rf "$venv"; echo "pypi: FAIL: cannot make a venv with $python (Debian: apt-get install python3-venv)"; echo "0 passed, 1 failed"; exit 1; }
fi
for spec in "hip-python~=7.2.0 hip" "rocm-bindings-hip~=10.0.0 rocm"; do
    read -r requirement module <<<"$spec"
    name=${requirement%%~=*}
    if ! log=$("$venv/bin/python" -m pip install -q --disable-pip-version-check "$requirement" 2>&1); then
        echo "$log" | tail -3 | sed 's/^/    /'
        for how in --sim dlopen; do
            for what in "over the cap" "capped view" "pooled round trip" "exit 0"; do
                check "$name ($how): $what: the package cannot be installed (pip install $requirement failed)" 0
            done
        done
        continue
    fi
    version=$("$venv/bin/python" -m pip show "$name" 2>/dev/null | sed -n 's/^Version: //p')
    # A 16 GiB simulated device, whatever the caller's HIPSIM_* or LD_PRELOAD say.
    for how in --sim dlopen; do
        if [ "$how" = --sim ]; then
            out=$(env -u LD_PRELOAD HIPSIM_VRAM=16GiB "$cli" run --quiet --sim --cap 1GiB --stats -- \
                "$venv/bin/python" tests/pypi/client.py "$module" "$cap" 2>&1)
        else
            out=$(env -u LD_PRELOAD HIPSIM_VRAM=16GiB LD_LIBRARY_PATH="$sim/lib" ROCM_PATH="$sim" \
                "$cli" run --quiet --cap 1GiB --stats -- \
                "$venv/bin/python" tests/pypi/client.py "$module" "$cap" 2>&1)
        fi
        rc=$?
        judge "$name $version ($how)"
    done
done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
