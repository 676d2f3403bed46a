"""The README's commands work as written in a new shell after the quick start (`make demo`, which builds .venv).

Every command of its bash blocks, and every inline `run.py` command, is a Makefile target or `.venv/bin/python
run.py ...`: never a bare `python`, which in a new shell is the system's (no torch: a traceback). Each `run.py`
command is parsed and validated exactly as the program does before it runs anything (`cli.prepare`: the family,
the backends, every flag against its owner, the outputs, the option values), with the venv's interpreter (the
one running these tests). The cheap ones then run for real, with that interpreter in place of `.venv/bin/python`,
from the repository root, in an environment holding only what a new shell has (no HF_HUB_OFFLINE, no
PYTHONPATH). What they cost: the GPT-2 export into `temp/`, as `make demo` makes it. `serve` (it runs until
Ctrl-C) and the commands that export other models are validated only.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

from conftest import ROOT
from NNDF import cli

README = (ROOT / "README.md").read_text()
VENV_PYTHON = ".venv/bin/python"
CHEAP = ("list", "list GPT2", "chat GPT2 --compare frameworks onnxrt", "generate GPT2 frameworks onnxrt")


def _block_commands() -> list[str]:
    """The commands of the README's bash blocks, comments dropped."""
    lines = [line for block in re.findall(r"```bash\n(.*?)```", README, re.S) for line in block.splitlines()]
    return [shlex.join(shlex.split(line, comments=True)) for line in lines if shlex.split(line, comments=True)]


def _inline_commands() -> list[str]:
    """Inline code spans that are `run.py` commands (not the `<action> <MODEL>` synopsis)."""
    prose = re.sub(r"```.*?```", "", README, flags=re.S)
    spans = (" ".join(span.split()) for span in re.findall(r"`([^`]*\brun\.py [^`]*)`", prose))
    return [span for span in spans if "<" not in span]


def _run_py(commands: list[str]) -> list[str]:
    return [c for c in commands if "run.py" in c.split()[:3]]


COMMANDS = _run_py(_block_commands()) + _run_py(_inline_commands())


def test_every_command_runs_with_the_venv_or_make():
    assert len(COMMANDS) >= 12, COMMANDS
    makefile = (ROOT / "Makefile").read_text()
    for command in _block_commands() + _inline_commands():
        first = command.split()[0]
        if first == "make":
            assert re.search(rf"^{command.split()[1]}:", makefile, re.M), f"no Makefile target: {command}"
        else:
            assert first == VENV_PYTHON, f"a new shell's {first!r} is not the venv's: {command}"


def test_the_demo_runs_what_the_readme_says():
    makefile = (ROOT / "Makefile").read_text()
    demo = re.search(r"^demo:.*\n\t\$\(PY\) (.*)$", makefile, re.M).group(1)
    assert f"{VENV_PYTHON} {demo}" in COMMANDS


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_is_valid(command, monkeypatch):
    """Parsed and checked as the program checks it before any model loads (nothing runs, nothing is written)."""
    monkeypatch.chdir(ROOT)  # the README's relative paths (data/, BLIP/offline/images/)
    argv = shlex.split(command)[2:]
    args = cli.build_parser(argv).parse_args(argv)
    assert callable(cli.prepare(args))


def _fresh_shell_env() -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TERM", "TMPDIR", "USER")
    return {k: os.environ[k] for k in keep if k in os.environ}


@pytest.mark.parametrize("command", [c for c in COMMANDS if any(c.split(None, 2)[2].startswith(p) for p in CHEAP)])
def test_cheap_commands_run_as_written(command):
    argv = [sys.executable, *shlex.split(command)[1:]]
    proc = subprocess.run(argv, cwd=ROOT, env=_fresh_shell_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "error:" not in proc.stderr and proc.stdout.strip(), proc.stderr[-3000:]


def test_the_system_python_gets_one_line_not_a_traceback(tmp_path):
    """A Python without the requirements (an empty virtual environment stands in for the system's)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    proc = subprocess.run([str(tmp_path / "bare" / "bin" / "python"), "run.py", "list"], cwd=ROOT,
                          env=_fresh_shell_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and ".venv/bin/python run.py" in proc.stderr, proc.stderr
