"""The notebooks run top to bottom in a real Jupyter kernel (nbclient + ipykernel, this interpreter: the venv's),
offline on the CPU, each within its time budget, and are committed without outputs.

A failing cell fails its test with the cell's error (nbclient's `CellExecutionError` carries the cell's source and
traceback). The kernel's working directory is `notebooks/` (as `jupyter lab` starts it); `HARNESS_WORKING_DIR`
points the notebooks' ONNX files and offline models at the session's working dir, so nothing lands in the repo.

`python tests/test_notebooks.py OUT_DIR` (`make notebooks`) executes every notebook into OUT_DIR with its outputs,
with the repository's default working dir (`temp/`).
"""
from __future__ import annotations

import os
import re
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpec
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"

# Seconds for a whole notebook, kernel start included. Measured on 2 CPU cores with a fresh working dir (exports
# included): playground 7, T5 19, GPT2 22, BART 40, benchmark_report 10 (98 s in all); LLAMA 38 with the cores
# shared (load average 3.5; GPT2 took 69 beside it); the rest is room for a busy machine. A notebook past its budget
# is interrupted and fails.
BUDGET = {"playground": 90, "T5": 120, "GPT2": 150, "BART": 180, "LLAMA": 150, "benchmark_report": 150}

# What each notebook must print (on a CPU, where TensorRT is always skipped in one line).
EXPECTED = {
    "playground": ["benchmark: GPT2", "accuracy: GPT2", "frameworks (", " s): "],  # chat: "<backend> (<s> s): <text>"
    "T5": ["validated: max |logits(ONNX) - logits(PyTorch)|", "TensorRT skipped: ", "benchmark: T5 t5-offline",
           "| hf-generate |"],
    "GPT2": ["KV cache off: ", "TensorRT skipped: ", "accuracy: GPT2 gpt2-offline", "lm-eval acc", "use_cache=False",
             "| hf-generate |"],
    "BART": ["KV cache off: ", "TensorRT skipped: ", "target language forced by the model: de_DE", "| fr_XX ",
             "benchmark: BART bart-offline"],
    "LLAMA": ["<|system|>\nAnswer briefly.<|end|>", "compare: LLAMA llama-offline", "| onnxrt-int8 ",
              "token perplexity int8 / fp32: ", "sliding window 8; ", "benchmark: LLAMA llama-offline",
              "| hf-generate |"],
    "benchmark_report": ["benchmark: GPT2 gpt2-offline", "| onnxrt     | cpu", "TPOT p50 ms",
                         "benchmark_cpu_example.json: GPT2 gpt2-offline on cpu"],
}
# Rows of the "same tokens as HF generate" tables: backends x prompts x settings (KV cache, beams, mBART target;
# LLAMA: the chat, the static cache, Mistral's window).
PARITY_ROWS = {"T5": 4, "GPT2": 16, "BART": 20, "LLAMA": 6}
PARITY = re.compile(r"^\|\s*(\w+)\s*\|.*\|\s*(True|False)\s*\|$", re.M)


class VenvKernelManager(AsyncKernelManager):
    """Starts the kernel with this interpreter (the venv's ipykernel), whatever kernelspecs exist elsewhere:
    nothing is registered, nothing outside the venv is used."""

    @property
    def kernel_spec(self) -> KernelSpec:
        return KernelSpec(argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                          display_name=f"Python ({sys.prefix})", language="python")


@contextmanager
def _environment(**values: str):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)  # the kernel inherits this process's environment
    try:
        yield
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


def execute(path: Path, working_dir: Path, budget: float) -> tuple[nbformat.NotebookNode, str]:
    """Run a notebook top to bottom within `budget` seconds; returns it with its outputs, and the interpreter
    prefix its kernel reported (a last cell added here and removed again)."""
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("import sys; print(sys.prefix, end='')"))
    deadline = time.monotonic() + budget
    past = f"{path.name} ran past its budget of {budget:.0f}s"
    client = NotebookClient(nb, kernel_manager_class=VenvKernelManager, startup_timeout=min(budget, 120),
                            timeout_func=lambda cell: max(1, int(deadline - time.monotonic())),
                            interrupt_on_timeout=True,  # else nbclient 0.11 only logs a timeout and keeps waiting
                            error_on_timeout={"ename": "TimeoutError", "evalue": past, "traceback": [past]},
                            resources={"metadata": {"path": str(path.parent)}})
    with _environment(HARNESS_WORKING_DIR=str(working_dir), HF_HUB_OFFLINE=os.environ.get("HF_HUB_OFFLINE", "1")):
        client.execute()
    prefix = "".join(o.get("text", "") for o in nb.cells.pop().outputs)
    return nb, prefix


def text_of(nb: nbformat.NotebookNode) -> str:
    """Everything the cells printed or displayed as text."""
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", "") or out.get("data", {}).get("text/plain", ""))
    return "\n".join(parts)


def images_of(nb: nbformat.NotebookNode) -> int:
    return sum("image/png" in out.get("data", {}) for cell in nb.cells for out in cell.get("outputs", []))


def _names() -> list[str]:
    return sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb"))


def test_every_notebook_has_a_budget_and_expectations():
    assert set(_names()) == set(BUDGET) == set(EXPECTED)


@pytest.mark.parametrize("name", _names())
def test_committed_without_outputs(name):
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    nbformat.validate(nb)
    for n, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{name}.ipynb cell {n} has outputs"


@pytest.mark.parametrize("name", _names())
def test_notebook_runs(name, workdir):
    start = time.monotonic()
    nb, prefix = execute(NOTEBOOKS / f"{name}.ipynb", workdir, BUDGET[name])
    print(f"{name}.ipynb: {time.monotonic() - start:.1f}s")
    assert prefix == sys.prefix, f"the kernel ran {prefix}, not this interpreter's {sys.prefix}"
    out = text_of(nb)
    for expected in EXPECTED[name]:
        assert expected in out, f"{name}.ipynb printed no {expected!r}"
    parity = PARITY.findall(out)
    assert len(parity) == PARITY_ROWS.get(name, 0), f"{name}.ipynb: {len(parity)} rows compared with HF generate"
    assert all(match == "True" for _, match in parity), f"{name}.ipynb: a backend differs from HF generate"
    if parity:
        assert {backend for backend, _ in parity} == {"frameworks", "onnxrt"}
    if name == "benchmark_report":
        assert images_of(nb) >= 6  # three plots of the run here, three of the saved JSON


def main(out_dir: str) -> None:
    """`make notebooks`: execute every notebook into OUT_DIR with its outputs (working dir: the repo's temp/)."""
    target = Path(out_dir)
    target.mkdir(parents=True, exist_ok=True)
    for name in _names():
        start = time.monotonic()
        nb, _ = execute(NOTEBOOKS / f"{name}.ipynb", ROOT / "temp", BUDGET[name] * 2)
        nbformat.write(nb, target / f"{name}.ipynb")
        print(f"{target / name}.ipynb ({time.monotonic() - start:.0f}s)")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/test_notebooks.py OUT_DIR")
    main(sys.argv[1])
