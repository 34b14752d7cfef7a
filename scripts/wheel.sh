#!/usr/bin/env bash
# Builds the rocmguard wheel into dist/: the release CLI, librocmguard.so and hipsim (the
# simulated HIP runtime, for `rocmguard run --sim`) packed by setuptools through `pip wheel`
# (the standard tools for a wheel of prebuilt files; see docs/install.md for why not maturin)
# in a throwaway venv under target/wheel. Tagged py3-none-manylinux_2_X_x86_64, X from the
# newest glibc symbol version the files need.
#   scripts/wheel.sh            # -> dist/rocmguard-<version>-py3-none-manylinux_2_X_x86_64.whl
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
python=${PYTHON:-python3}

cargo build --release -q -p rocmguard-preload -p rocmguard-cli -p hipsim
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
glibc=$(objdump -T target/release/librocmguard.so target/release/rocmguard target/release/libamdhip64.so \
    | grep -o 'GLIBC_2\.[0-9]*' | sort -uV | tail -1 | cut -d. -f2)
platform="manylinux_2_${glibc}_x86_64"

work=target/wheel
stage=$work/stage
rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/lib" "$stage/hipsim"
cp -r python/rocmguard python/setup.py "$stage/"
cp README.md "$stage/"
cp target/release/rocmguard "$stage/bin/"
cp target/release/librocmguard.so "$stage/lib/"
cp target/release/libamdhip64.so "$stage/hipsim/"
strip --strip-debug "$stage/bin/rocmguard" "$stage/lib/librocmguard.so" "$stage/hipsim/libamdhip64.so"
# The tags, read by setuptools' bdist_wheel when pip builds the wheel.
printf '[bdist_wheel]\npython_tag = py3\nplat_name = %s\n' "$platform" >"$stage/setup.cfg"

# setuptools 70.1 or newer has bdist_wheel built in (older ones warn that `wheel` is needed).
if ! "$work/build-venv/bin/python" -c 'import setuptools, sys; sys.exit(tuple(map(int, setuptools.__version__.split(".")[:2])) < (70, 1))' 2>/dev/null; then
    rm -rf "$work/build-venv"
    "$python" -m venv "$work/build-venv"
    "$work/build-venv/bin/python" -m pip install -q --disable-pip-version-check 'setuptools>=70.1'
fi
mkdir -p dist
rm -f dist/rocmguard-"$version"-*.whl
ROCMGUARD_VERSION="$version" "$work/build-venv/bin/python" -m pip wheel -q --disable-pip-version-check \
    --no-deps --no-build-isolation --wheel-dir dist "$stage"
ls dist/rocmguard-"$version"-py3-none-"$platform".whl
