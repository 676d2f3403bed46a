"""The notebooks' code cells run as written (offline, CPU), so they cannot rot."""
import json

from conftest import ROOT


def test_playground_runs(monkeypatch, capsys):
    notebook = json.loads((ROOT / "notebooks" / "playground.ipynb").read_text())
    code = "\n".join("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code")
    monkeypatch.chdir(ROOT / "notebooks")
    exec(compile(code, "playground.ipynb", "exec"), {})
    out = capsys.readouterr().out
    assert "benchmark: GPT2" in out and "accuracy: GPT2" in out and "frameworks: " in out
