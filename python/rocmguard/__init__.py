"""rocmguard, installed from its wheel: the `rocmguard` command and `librocmguard.so`.

The wheel carries the native CLI (installed as the `rocmguard` command), the preload library
(installed as `<prefix>/lib/librocmguard.so`, where the CLI looks beside its own `../lib`), so
`rocmguard run -- CMD` preloads the library that came with it, and hipsim, the simulated HIP
runtime (`<prefix>/lib/rocmguard-hipsim/lib/libamdhip64.so`) that `rocmguard run --sim -- CMD`
runs a program on. `python -m rocmguard` runs the same CLI. Nothing here imports torch or any
other package.
"""

import os
import sysconfig

__all__ = ["cli_path", "library_path"]


def cli_path():
    """The `rocmguard` binary this wheel installed."""
    return os.path.join(sysconfig.get_path("scripts"), "rocmguard")


def library_path():
    """The `librocmguard.so` this wheel installed (for LD_PRELOAD by hand)."""
    return os.path.join(sysconfig.get_path("data"), "lib", "librocmguard.so")
