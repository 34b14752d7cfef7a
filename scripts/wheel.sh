#!/usr/bin/env bash
# Builds the rocmguard wheel into dist/: the release CLI and librocmguard.so packed by setuptools
# and wheel (the standard tools for a wheel of prebuilt files; see docs/install.md for why not
# maturin) in a throwaway venv under target/wheel. Tagged py3-none-manylinux_2_X_x86_64, X from
# the newest glibc symbol version the two files need.
#   scripts/wheel.sh            # -> dist/rocmguard-<version>-py3-none-manylinux_2_X_x86_64.whl
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
python=${PYTHON:-python3}

cargo build --release -q -p rocmguard-preload -p rocmguard-cli
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
glibc=$(objdump -T target/release/librocmguard.so target/release/rocmguard \
    | grep -o 'GLIBC_2\.[0-9]*' | sort -uV | tail -1 | cut -d. -f2)
platform="manylinux_2_${glibc}_x86_64"

work=target/wheel
stage=$work/stage
rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/lib"
cp -r python/rocmguard python/setup.py "$stage/"
cp README.md "$stage/"
cp target/release/rocmguard "$stage/bin/"
cp target/release/librocmguard.so "$stage/lib/"
strip --strip-debug "$stage/bin/rocmguard" "$stage/lib/librocmguard.so"

if [ ! -x "$work/build-venv/bin/python" ]; then
    "$python" -m venv "$work/build-venv"
    "$work/build-venv/bin/python" -m pip install -q setuptools wheel
fi
mkdir -p dist
rm -f dist/rocmguard-"$version"-*.whl
(cd "$stage" && ROCMGUARD_VERSION="$version" "$root/$work/build-venv/bin/python" setup.py -q \
    bdist_wheel --python-tag py3 --plat-name "$platform" --dist-dir "$root/dist" >/dev/null)
ls dist/rocmguard-"$version"-py3-none-"$platform".whl
