#!/usr/bin/env python3
"""`flashattn`, the command-line tool, for a `pip install .`ed package.

The tool is a C++ executable that `pip install .` puts inside the package, at
flashattn/bin/flashattn, beside the libflashattn.so it loads (its run path is $ORIGIN/..).
This file is also installed as the `flashattn` script on the PATH (the environment's bin/);
there it finds the package with importlib, without importing it (importing flashattn can
import torch, a second or more), and replaces itself with the executable. So the wheel holds
no path of one Python version or install layout.
"""
import importlib.util
import os
import sys


def executable():
    """The path of the installed tool; raises FileNotFoundError naming where it looked."""
    spec = importlib.util.find_spec("flashattn")
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        path = os.path.join(folder, "bin", "flashattn")
        if os.access(path, os.X_OK):
            return path
    raise FileNotFoundError(
        f"flashattn: the command-line tool is not installed (looked for bin/flashattn in "
        f"{folders or 'no flashattn package'}); `pip install .` from the repository root "
        f"builds it, or run a CMake build's tools/flashattn/flashattn")


def main():
    try:
        path = executable()
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        return 127
    os.execv(path, ["flashattn", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
