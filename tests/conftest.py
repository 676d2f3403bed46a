"""Shared fixtures: a session working dir, offline models of every registered architecture, the CLI runner."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# The CLI fits its tables to COLUMNS (NNDF/results.py); the tests read whole tables and set COLUMNS where fitting is
# the point (test_terminal_output.py). GNU readline, which pytest loads, exports COLUMNS=80 and LINES=24 to the
# processes started after it: pytest-xdist's workers would otherwise fit every table to 80 columns.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)
# The suite's processes (`make test`: two on two cores) run torch's CPU ops on one thread each, and so do the CLI runs
# and notebook kernels they start (they inherit this): two processes of two OpenMP threads on two cores contend for
# them, which measured 19% slower over a fifth of the suite (7:12 against 5:50). ONNX Runtime's own pool is not
# OpenMP's and keeps its default. Tests of thread counts set the count they start from.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
# Off CUDA, the tests run our Triton kernels (NNDF/backends/torch/kernels.py) under Triton's interpreter: set before
# Triton first sees them. The CPU suite also hides any GPU from itself and the CLI runs it starts, whose default
# device is CUDA where there is one: on a GPU workstation `make test` runs what it runs on the CPU machine.
if os.environ.get("HARNESS_TEST_DEVICE", "cpu") != "cuda":
    os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
# The ONNX Runtime ops library compiled once per sources digest for every test's artifact folder, in a cache of the
# tests' own, not the user's (NNDF/backends/onnxrt/custom_ops.py).
os.environ.setdefault("NNDF_OPS_CACHE", str(Path(__import__("tempfile").gettempdir()) / f"nndf-test-ops-{os.getuid()}"))

from tests.triton_fixtures import triton_server  # noqa: E402,F401 - the session's one Triton server


# Files that use the session's Triton server (tests/triton_fixtures.py): one server and one set of deployments.
TRITON_FILES = ("test_triton.py", "test_triton_encoder.py", "test_triton_generate.py")


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` (`make test`), with the Triton files as one unit: they run on one process, which starts
    the one server they share; every other file is its own unit, as loadfile makes it."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class TritonTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return "triton" if Path(scope).name in TRITON_FILES else scope

    return TritonTogether(config, log)


@pytest.fixture(scope="session")
def workdir(tmp_path_factory) -> Path:
    """The session's working dir: offline models and exports built once and shared by the tests. Under
    pytest-xdist (`make test` runs two processes) both processes share one, beside their own temporary folders:
    an artifact one builds, the other finds current or waits for under the artifact's build lock
    (NNDF/artifacts.py), so no export is made twice. Tests that damage or remove artifacts copy them first."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return tmp_path_factory.mktemp("work")
    shared = tmp_path_factory.getbasetemp().parent / "work"
    shared.mkdir(exist_ok=True)
    return shared


@pytest.fixture(scope="session")
def hf_rows():
    """HF `generate`'s new ids per row (test_parity.py `_hf`), computed once per session for each (variant, prompt
    texts, device, beams, KV cache, EOS, pad) and shared by every test that compares with the same reference:
    test_parity.py's backends and test_seq2seq_static.py's static cache (the same offline model, the same prompts)."""
    rows = {}

    def get(variant, texts, model, prompt, beams, use_cache, eos, pad):
        from test_parity import _hf

        key = (tuple(variant), tuple(texts), str(model.device), beams, use_cache, eos, pad)
        if key not in rows:
            rows[key] = _hf(model, prompt, beams, use_cache, eos, pad)
        return rows[key]

    return get


def offline_variants(task_type: type | None = None):
    """(family, variant) for every offline variant of every registered family (whose task is a `task_type`)."""
    from NNDF import registry

    return [(f.name, v.name) for f in registry.families().values() for v in f.variants
            if v.offline and (task_type is None or isinstance(f.task, task_type))]


def run_cli(*args: str, cwd: Path = ROOT, stdin: str | None = None, timeout: int = 600):
    """Run `python run.py ...` in a subprocess; returns CompletedProcess with text output."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, str(ROOT / "run.py"), *args], cwd=cwd, env=env, input=stdin,
                          capture_output=True, text=True, timeout=timeout)


def cli_in_process(capsys, *args: str) -> subprocess.CompletedProcess:
    """`run.py ...` in this process (`NNDF.cli.main`, its output captured by `capsys`), for the cases that are not
    about the program's start-up: the same exit code and the same stdout and stderr text as `run_cli`, without a
    new interpreter importing torch and transformers. An argparse refusal's SystemExit gives its code."""
    from NNDF import cli

    capsys.readouterr()
    try:
        code = cli.main(list(args))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["run.py", *args], code, out, err)


def generate_tokens(run, steps, prompt, new: int, beams: int, eos, times: int = 1, **settings):
    """Our loop's new tokens per row (up to EOS) for `prompt`, generated `times` times on the same steps: every
    generation after the first reuses the pooled static buffers (and a captured graph) and must give the same
    tokens."""
    from NNDF.actions.common import generate_prompt
    from NNDF.generation import GenerationConfig

    out = []
    for _ in range(times):
        config = GenerationConfig(max_new_tokens=new, num_beams=beams, eos_token_id=eos,
                                  pad_token_id=run.tokenizer.pad_token_id, **settings)
        result = generate_prompt(steps, prompt, config)
        out.append([result.new_tokens(r, eos) for r in range(prompt.batch)])
    assert all(o == out[0] for o in out), "a second generation on the same buffers differs"
    return out[0]


def generate_twice(run, steps, prompt, new: int, beams: int, eos, **settings):
    """`generate_tokens` twice: the second generation reuses the pooled static buffers (and a captured graph)."""
    return generate_tokens(run, steps, prompt, new, beams, eos, times=2, **settings)


def counted_kernels(monkeypatch):
    """A Counter of the calls of our Triton kernels (`NNDF.backends.torch.kernels`: gemv, decode_attention,
    decode_attention_split) from here on, each still run: a step that bypassed one shows a zero. GEMV calls given
    a norm, an activation, a residual or a K/V cache to apply or write inside the kernel also count as "gemv+norm",
    "gemv+activation" (a ReLU, which the kernel applies on load with or without `gemv_fusion`: "gemv+relu"),
    "gemv+residual", "gemv+cache"."""
    import collections

    from CausalLM.fused_step import triton_kernels

    kernels, calls = triton_kernels(), collections.Counter()

    def count(name, args, kwargs):
        calls.update([name])
        if name == "gemv":
            calls.update(f"gemv+{part}" for part in ("norm", "activation", "residual", "cache")
                         if kwargs.get(part) not in (None, "relu"))
            if kwargs.get("relu") or kwargs.get("activation") == "relu":
                calls.update(["gemv+relu"])

    for name in ("gemv", "decode_attention", "decode_attention_split"):
        monkeypatch.setattr(kernels, name, lambda *a, _name=name, _real=getattr(kernels, name), **k:
                            count(_name, a, k) or _real(*a, **k))
    return calls


def random_model(config, folder: Path, seed: int, tokenizer_dir: Path, std: float = 0.2) -> str:
    """A random causal LM of `config` saved in `folder` with `tokenizer_dir`'s tokenizer files: its matrices redrawn
    with std `std` (`NNDF.offline.redraw_weights`) and every 1-D parameter (norms and biases, which HF initialises
    to 1 and 0) moved by N(0, std), so a graph or step that leaves one out cannot give the model's tokens."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    from NNDF.offline import redraw_weights

    model = AutoModelForCausalLM.from_config(config)
    redraw_weights(model, seed, std)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 1:
                param.add_(torch.randn(param.shape, generator=generator) * std)
    model.save_pretrained(folder)
    for path in Path(tokenizer_dir).glob("*.json"):
        shutil.copyfile(path, Path(folder) / path.name)
    return str(folder)
