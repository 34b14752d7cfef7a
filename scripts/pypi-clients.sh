#!/usr/bin/env bash
# Real third-party clients: PyPI's `hip-python` (7.2) and `rocm-bindings-hip` (10.0), which load
# the HIP runtime themselves, installed with pip into a venv of their own (target/pypi-venv) and
# run (tests/pypi/client.py) on hipsim under the shim with `rocmguard run --sim --cap 1GiB`.
# For each: an allocation over the cap is refused with hipErrorOutOfMemory, hipMemGetInfo
# reports the capped view, a pooled block round-trips through hipMemcpy, the program exits 0.
# A package that cannot be installed fails its checks (never a quiet skip). One line per check,
# then `N passed, N failed`. Needs `cargo build --release` first (scripts/test.sh does it).
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

if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv" || { rm -rf "$venv"; echo "pypi: FAIL: cannot make a venv with $python (Debian: apt-get install python3-venv)"; echo "0 passed, 2 failed"; exit 1; }
fi
for spec in "hip-python~=7.2.0 hip" "rocm-bindings-hip~=10.0.0 rocm"; do
    read -r requirement module <<<"$spec"
    name=${requirement%%~=*}
    if ! log=$("$venv/bin/python" -m pip install -q --disable-pip-version-check "$requirement" 2>&1); then
        echo "$log" | tail -3 | sed 's/^/    /'
        for what in "over the cap" "capped view" "pooled round trip" "exit 0"; do
            check "$name: $what: the package cannot be installed (pip install $requirement failed)" 0
        done
        continue
    fi
    version=$("$venv/bin/python" -m pip show "$name" 2>/dev/null | sed -n 's/^Version: //p')
    # A 16 GiB simulated device, whatever the caller's HIPSIM_* or LD_PRELOAD say.
    out=$(env -u LD_PRELOAD HIPSIM_VRAM=16GiB "$cli" run --quiet --sim --cap 1GiB --stats -- \
        "$venv/bin/python" tests/pypi/client.py "$module" "$cap" 2>&1)
    rc=$?
    seen() { echo "$out" | sed -n "s/^$1 //p" | head -1; }
    # The guard's table at exit: the last columns are allocs hits dev-allocs dev-frees trims
    # retries ooms.
    row=$(echo "$out" | grep '^dev0 ' | tail -1)
    hits=$(echo "$row" | awk '{ print $(NF - 5) }')
    label="$name $version"
    check "$label: twice the cap refused with $(seen over_cap || true)" \
        "$([ "$(seen over_cap)" = hipErrorOutOfMemory ] && echo 1)"
    check "$label: hipMemGetInfo total $(seen total), free $(seen free) (cap $cap)" \
        "$([ "$(seen total)" = "$cap" ] && [ -n "$(seen free)" ] && [ "$(seen free)" -le "$cap" ] && echo 1)"
    check "$label: 4 KiB through hipMemcpy and back: $(seen roundtrip0), again from the pool: $(seen roundtrip1) (pool hits ${hits:-none})" \
        "$([ "$(seen roundtrip0)" = intact ] && [ "$(seen roundtrip1)" = intact ] && [ "${hits:-0}" -ge 1 ] && echo 1)"
    check "$label: exit status $rc" "$([ "$rc" = 0 ] && echo 1)"
    [ "$rc" = 0 ] || echo "$out" | tail -20 | sed 's/^/    /'
done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
