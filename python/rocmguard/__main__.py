"""`python -m rocmguard ARGS`: the same CLI as the `rocmguard` command."""

import os
import sys

from rocmguard import cli_path, library_path


def main():
    cli = cli_path()
    if not os.access(cli, os.X_OK):
        sys.exit(f"rocmguard: the CLI is missing at {cli}; reinstall the wheel")
    env = dict(os.environ)
    # Point the CLI at this installation's library even when it runs from elsewhere.
    if "ROCMGUARD_LIB" not in env and os.path.exists(library_path()):
        env["ROCMGUARD_LIB"] = library_path()
    os.execve(cli, [cli] + sys.argv[1:], env)


if __name__ == "__main__":
    main()
