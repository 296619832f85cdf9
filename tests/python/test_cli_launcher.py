"""The `flashattn` script that `pip install .` puts on the PATH (python/flashattn/_cli.py): it
finds the package without importing it and execs the tool inside it, flashattn/bin/flashattn."""
import os
import subprocess
import sys
from pathlib import Path

LAUNCHER = Path(__file__).resolve().parents[2] / "python" / "flashattn" / "_cli.py"


def run_launcher(site, *args):
    """The launcher run as the installed script is: by path, with only `site` on the path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    return subprocess.run([sys.executable, str(LAUNCHER), *args], env=env, capture_output=True,
                          text=True, cwd=site)


def fake_package(site, with_tool=True):
    """site/flashattn with an __init__ that must not run and, optionally, a bin/flashattn
    that prints its arguments."""
    package = site / "flashattn"
    (package / "bin").mkdir(parents=True)
    (package / "__init__.py").write_text("raise SystemExit('imported the package')\n")
    if with_tool:
        tool = package / "bin" / "flashattn"
        tool.write_text('#!/bin/sh\necho "$0|$*"\nexit 3\n')
        tool.chmod(0o755)


def test_execs_the_tool_inside_the_package_without_importing_it(tmp_path):
    fake_package(tmp_path)
    result = run_launcher(tmp_path, "check", "--quick")
    assert result.returncode == 3, result.stderr  # the tool's exit status, through exec
    assert result.stdout.endswith("|check --quick\n")


def test_says_where_it_looked_when_the_tool_is_missing(tmp_path):
    fake_package(tmp_path, with_tool=False)
    result = run_launcher(tmp_path, "--help")
    assert result.returncode == 127
    assert "command-line tool is not installed" in result.stderr
    assert str(tmp_path / "flashattn") in result.stderr
