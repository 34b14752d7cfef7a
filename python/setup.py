"""Packs the prebuilt `rocmguard` CLI, `librocmguard.so` and hipsim's `libamdhip64.so` into a
wheel (scripts/wheel.sh stages them beside this file first; nothing is compiled here)."""

import os

from setuptools import setup

setup(
    name="rocmguard",
    version=os.environ["ROCMGUARD_VERSION"],
    description="Keeps GPU programs alive on AMD ROCm: a preloaded device memory pool with a cap, trim and retry.",
    long_description=open("README.md").read(),
    long_description_content_type="text/markdown",
    license="MIT OR Apache-2.0",
    python_requires=">=3.8",
    packages=["rocmguard"],
    # The native CLI goes to <prefix>/bin (data, not `scripts`, which setuptools reads as text
    # to rewrite a shebang), keeping its executable bit; the library to <prefix>/lib, the
    # `../lib` beside the command where the CLI looks for it; hipsim, the simulated runtime, to
    # <prefix>/lib/rocmguard-hipsim/lib, a ROCm-like root for `rocmguard run --sim`.
    data_files=[
        ("bin", ["bin/rocmguard"]),
        ("lib", ["lib/librocmguard.so"]),
        ("lib/rocmguard-hipsim/lib", ["hipsim/libamdhip64.so"]),
    ],
    classifiers=["Operating System :: POSIX :: Linux", "Environment :: GPU"],
)
