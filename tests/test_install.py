"""`pip install -e .` from the clone: the packages import from any folder and `hf-harness` is `run.py`; installed
from a wheel (no clone behind it) the command refuses in one line."""
from __future__ import annotations

import site
import subprocess
import venv
from pathlib import Path

from NNDF import cli
from tests.conftest import ROOT


def test_editable_install_runs_the_cli_from_any_folder(tmp_path):
    env_dir = tmp_path / "env"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    packages = subprocess.run([python, "-c", "import site; print(site.getsitepackages()[0])"], capture_output=True,
                              text=True, check=True).stdout.strip()
    # the requirements (and pip, setuptools) are this interpreter's: the new environment sees them through a .pth
    (Path(packages) / "requirements.pth").write_text(site.getsitepackages()[0] + "\n")
    install = subprocess.run([python, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                              "-e", str(ROOT)], cwd=tmp_path, capture_output=True, text=True)
    assert install.returncode == 0, install.stdout + install.stderr
    assert not (ROOT / "build").exists()  # nothing written into the clone

    listed = subprocess.run([env_dir / "bin" / "hf-harness", "list"], cwd=tmp_path, capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr
    assert "gpt2-offline" in listed.stdout and "llama-offline" in listed.stdout
    where = subprocess.run([python, "-c", "import NNDF, LLAMA; print(NNDF.__file__, LLAMA.__file__)"], cwd=tmp_path,
                           capture_output=True, text=True, check=True).stdout.split()
    assert where == [str(ROOT / "NNDF" / "__init__.py"), str(ROOT / "LLAMA" / "__init__.py")]

    # a hint naming a file of the clone names it as a command typed in this folder takes it
    hub = subprocess.run([env_dir / "bin" / "hf-harness", "accuracy", "GPT2", "frameworks", "--num-samples", "1",
                          "-wd", str(tmp_path / "w")], cwd=tmp_path, capture_output=True, text=True)
    assert hub.returncode == 2 and f"--dataset {ROOT / 'data' / 'lambada_offline.jsonl'}" in hub.stderr, hub.stderr

    wrong = subprocess.run([env_dir / "bin" / "hf-harness", "lsit"], cwd=tmp_path, capture_output=True, text=True)
    assert wrong.returncode == 2 and wrong.stderr.startswith("error: hf-harness: ")  # named as typed
    assert "invalid choice: 'lsit'" in wrong.stderr


def test_packages_without_the_clone_refuse_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli, "ROOT", tmp_path)  # where a wheel's packages sit: no data/ beside them
    assert cli.main(["list"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "runs from a clone of its repository" in err and "pip install -e" in err
