#!/usr/bin/env bash
# Builds the wheel (scripts/wheel.sh), installs it with `pip install --no-index` into a fresh
# venv, and checks what a pip user gets: the `rocmguard` command, `python -m rocmguard`, and
# that `rocmguard run` preloads the library that came in the wheel (not a checkout's). Prints
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

# From source: scripts/install.sh PREFIX gives a `rocmguard` that preloads PREFIX's library.
prefix=$(dirname "$venv")/prefix
scripts/install.sh "$prefix" >/dev/null
want=$(cd "$prefix/lib" && pwd -P)/librocmguard.so
maps=$(cd / && env -i HOME="$HOME" PATH=/usr/bin:/bin "$prefix/bin/rocmguard" run -- sh -c 'grep -o "/[^ ]*librocmguard.so" /proc/$$/maps | sort -u')
[ "$maps" = "$want" ] || fail "scripts/install.sh layout: 'rocmguard run' preloaded '${maps:-nothing}', not $want"
echo "wheel: ok: scripts/install.sh PREFIX: PREFIX/bin/rocmguard run -- CMD preloads $maps"
