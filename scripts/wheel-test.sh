#!/usr/bin/env bash
# Builds the wheel (scripts/wheel.sh), installs it with `pip install --no-index` into a fresh
# venv, and checks what a pip user gets: the `rocmguard` command, `python -m rocmguard`, that
# `rocmguard run` preloads the library that came in the wheel (not a checkout's), and that
# `rocmguard run --sim` runs a program on the wheel's simulator. Prints
# one line per check; exits 1 on the first that fails. Also checks the from-source layout of
# scripts/install.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}

wheel=$(scripts/wheel.sh 2>/dev/null | tail -1)
venv=$(mktemp -d)/venv
trap 'rm -rf "$(dirname "$venv")"' EXIT
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q --no-index "$wheel"
fail() { echo "wheel: FAIL: $*" >&2; exit 1; }
echo "wheel: $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB) installed into a fresh venv"

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
# A clean environment, so nothing from this checkout (PATH, ROCMGUARD_LIB) can stand in.
clean=(env -i HOME="$HOME" PATH="$venv/bin:/usr/bin:/bin")
out=$("${clean[@]}" rocmguard --version) || fail "rocmguard --version: $out"
[[ "$out" == *"$version"* ]] || fail "rocmguard --version says '$out', not $version"
echo "wheel: ok: rocmguard --version -> $out ($(command -v "$venv/bin/rocmguard"))"
out=$("${clean[@]}" python -m rocmguard --version) || fail "python -m rocmguard --version: $out"
[[ "$out" == *"$version"* ]] || fail "python -m rocmguard --version says '$out'"
echo "wheel: ok: python -m rocmguard --version -> $out"
want=$(cd "$venv/lib" && pwd -P)/librocmguard.so
for launcher in "rocmguard" "python -m rocmguard"; do
    # The child prints the library mapped into it: the preload must be the wheel's own copy.
    maps=$(cd / && "${clean[@]}" $launcher run -- sh -c 'grep -o "/[^ ]*librocmguard.so" /proc/$$/maps | sort -u')
    [ "$maps" = "$want" ] || fail "'$launcher run' preloaded '${maps:-nothing}', not $want"
    echo "wheel: ok: '$launcher run -- CMD' preloads $maps"
done

# `rocmguard run --sim`: a program that opens libamdhip64.so itself (ctypes) gets the wheel's
# hipsim, under the shim: the capped view, with no checkout and no ROCm on the machine.
sim=$(cd "$venv/lib" && pwd -P)/rocmguard-hipsim/lib/libamdhip64.so
probe='import ctypes, re
hip = ctypes.CDLL("libamdhip64.so")
free, total = ctypes.c_size_t(), ctypes.c_size_t()
assert hip.hipMemGetInfo(ctypes.byref(free), ctypes.byref(total)) == 0
maps = set(re.findall(r"/\S*lib(?:amdhip64|rocmguard)\.so", open("/proc/self/maps").read()))
print(total.value, " ".join(sorted(maps)))'
err=$(dirname "$venv")/sim.err
out=$(cd / && "${clean[@]}" rocmguard run --quiet --sim --cap 1GiB -- python -c "$probe" 2>"$err") ||
    fail "rocmguard run --sim: $out $(cat "$err")"
[ "$out" = "$((1 << 30)) $want $sim" ] ||
    fail "rocmguard run --sim --cap 1GiB: '$out', not the capped 1 GiB from $sim under the wheel's library"
echo "wheel: ok: 'rocmguard run --sim --cap 1GiB -- CMD' runs on the wheel's hipsim: hipMemGetInfo total 1 GiB"

# From source: scripts/install.sh PREFIX gives a `rocmguard` that preloads PREFIX's library.
prefix=$(dirname "$venv")/prefix
scripts/install.sh "$prefix" >/dev/null
want=$(cd "$prefix/lib" && pwd -P)/librocmguard.so
maps=$(cd / && env -i HOME="$HOME" PATH=/usr/bin:/bin "$prefix/bin/rocmguard" run -- sh -c 'grep -o "/[^ ]*librocmguard.so" /proc/$$/maps | sort -u')
[ "$maps" = "$want" ] || fail "scripts/install.sh layout: 'rocmguard run' preloaded '${maps:-nothing}', not $want"
echo "wheel: ok: scripts/install.sh PREFIX: PREFIX/bin/rocmguard run -- CMD preloads $maps"
root=$(env -i HOME="$HOME" PATH=/usr/bin:/bin "$prefix/bin/rocmguard" run --quiet --sim --dry-run -- true | sed -n 's/^ROCM_PATH=//p')
[ "$root" = "$(cd "$prefix/lib" && pwd -P)/rocmguard-hipsim" ] ||
    fail "scripts/install.sh layout: 'rocmguard run --sim' uses '${root:-nothing}', not PREFIX's hipsim"
echo "wheel: ok: scripts/install.sh PREFIX: PREFIX/bin/rocmguard run --sim uses $root"
