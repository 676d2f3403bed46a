"""GPT-2's fused decode step (`--fused-decode` on frameworks, GPT2/fused_decode.py) gives HF `generate`'s tokens,
token for token in fp32: gpt2-offline (trained) and a tiny random GPT-2 (exact GELU), greedy and beam search (beam
reordering of our own cache), a left-padded batch of different prompt lengths, EOS mid-way, and a second
generation on the same pooled buffers; compiled once on the CPU (the reduction form of one-row products); the
step's other settings (SDPA attention, folded layer norms). Model types and GPT-2 configs without a
fused step refuse the flag in one line, exit 2.

With HARNESS_TEST_DEVICE=cuda the parity cases also run the step from a CUDA graph, eager and compiled.
"""
import os
import re

import pytest

from CausalLM.fused_step import DECODER_SETTINGS, FusedSettings
from NNDF import registry
from NNDF.actions.common import backend_steps, encode, open_run
from CausalLM.torch_steps import TorchSteps
from NNDF.backends.torch.compile import COMPILE_OPTIONS
from NNDF.context import make_context
from NNDF.errors import UsageError
from NNDF.options import ModelOptions

from conftest import cli_in_process, counted_kernels, generate_tokens, generate_twice

DEVICE = os.environ.get("HARNESS_TEST_DEVICE", "cpu")
PROMPTS = ["The for statement is used to", "A", "Names refer to objects"]
NEW = 10
# (use_cuda_graph, torch_compile); the CPU compiles once, in test_compiled_step_on_cpu
MODES = [(False, False)] + ([(True, False), (True, True)] if DEVICE == "cuda" else [])


def _mode_id(mode) -> str:
    return "-".join(n for n, on in zip(("graph", "compile"), mode) if on) or "eager"


def _tiny_dir(root, **config):
    """A random 2-layer GPT-2 folder (the offline byte-level BPE tokenizer) with these config fields; weights of
    std 0.3 (HF's 0.02 makes a tiny model's next token almost independent of its input: a masking bug would pass)."""
    import torch
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    from NNDF.offline import SHARED_TOKENIZERS

    tok = AutoTokenizer.from_pretrained(SHARED_TOKENIZERS / "byte-bpe", local_files_only=True)
    eos = tok.eos_token_id
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=128, n_embd=32, n_layer=2, n_head=4,
                                       initializer_range=0.3, bos_token_id=eos, eos_token_id=eos, pad_token_id=eos,
                                       **config))
    model.save_pretrained(root, safe_serialization=True)
    tok.save_pretrained(root)
    return str(root)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return _tiny_dir(tmp_path_factory.mktemp("tiny-gpt2"), activation_function="gelu")


def _run(workdir, variant="gpt2-offline", torch_dir=None, fused=True, graph=False, compiled=False, family="GPT2"):
    return make_context(registry.family(family), ModelOptions(
        variant=variant, torch_dir=torch_dir, working_dir=str(workdir), batch_size=3, use_cache=True, use_mask=True,
        device=DEVICE, static_cache=fused, fused_decode=fused, use_cuda_graph=graph, torch_compile=compiled))


def _hf_tokens(run, prompt, beams, eos):
    """HF generate on the same inputs: new ids per row, up to EOS."""
    model = run.torch_model()
    out = model.generate(input_ids=prompt.input_ids.to(model.device), max_new_tokens=NEW, do_sample=False,
                         attention_mask=prompt.attention_mask.to(model.device), num_beams=beams, eos_token_id=eos,
                         pad_token_id=run.tokenizer.pad_token_id)
    rows = [out[r, prompt.input_ids.shape[1]:].tolist() for r in range(prompt.batch)]
    return [row[: row.index(eos) + 1] if eos in row else row for row in rows]


def _fused_tokens(run, steps, prompt, beams, eos):
    """Our loop on the fused steps, twice (the second generation reuses the pooled slot and its graph)."""
    return generate_twice(run, steps, prompt, NEW, beams, eos)


# our Triton kernels for every product of up to 4 rows (the LM head included) and the attention, on any device:
# off CUDA under Triton's interpreter (conftest.py)
KERNELS_EVERYWHERE = FusedSettings(gemv_above=0, gemv_rows=4, attention="kernel", kernels_everywhere=True,
                                   gemv_fusion=("gpt2", "opt"))


def _check_kernels(run, steps, monkeypatch, fusion: bool = False):
    """The step on our Triton kernels (`NNDF.backends.torch.kernels`) gives HF generate's tokens: greedy (3 rows:
    every product through our GEMV) with each attention kernel (one program per head, and split over column
    chunks), and 3 beams (9 rows: F.linear) with the first; every kernel counted, so a step that bypassed one
    fails. `fusion`: the step implements `gemv_fusion`, checked on and off. (Under Triton's interpreter on the CPU
    each generation takes seconds: the cases are few.)"""
    import dataclasses

    calls = counted_kernels(monkeypatch)

    prompt, eos = encode(run, PROMPTS), run.tokenizer.eos_token_id
    for attention, searches in (("kernel", (1, 3)), ("split", (1,))):
        steps.fused.settings = dataclasses.replace(KERNELS_EVERYWHERE, attention=attention)
        for beams in searches:  # one generation each (the buffers' reuse is checked on the default step)
            got = generate_tokens(run, steps, prompt, NEW, beams, eos)
            assert got == _hf_tokens(run, prompt, beams, eos), f"{attention}, beams={beams}"
    assert calls["gemv"] and calls["decode_attention"] and calls["decode_attention_split"], calls
    if not fusion:
        return
    # the norms, the activation, the residual adds and the K/V writes inside our GEMV (`gemv_fusion`); without it,
    # their own ops around it
    assert all(calls[f"gemv+{part}"] for part in ("norm", "residual", "cache")), calls
    assert calls["gemv+activation"] or calls["gemv+relu"], calls
    calls.clear()
    steps.fused.settings = dataclasses.replace(KERNELS_EVERYWHERE, gemv_fusion=())
    assert generate_tokens(run, steps, prompt, NEW, 1, eos) == _hf_tokens(run, prompt, 1, eos)
    # (a ReLU rides on the GEMV's load either way)
    assert calls["gemv"] and not any(calls[f"gemv+{part}"] for part in ("norm", "activation", "residual", "cache"))


def _check_parity(run, steps, tokens=_fused_tokens):
    """HF generate's tokens from `tokens` (our loop; by default twice on the same buffers): greedy and 3 beams on a
    left-padded batch, then EOS mid-way."""
    prompt = encode(run, PROMPTS)
    assert len(set(prompt.attention_mask.sum(1).tolist())) == 3  # left-padded rows of three lengths
    eos = run.tokenizer.eos_token_id
    for beams in (1, 3):
        expected = _hf_tokens(run, prompt, beams, eos)
        assert tokens(run, steps, prompt, beams, eos) == expected, f"beams={beams}"
    early = expected[0][2]  # a token the search emits early becomes the EOS: rows stop at different steps
    for beams in (1, 3):
        assert tokens(run, steps, prompt, beams, early) == _hf_tokens(run, prompt, beams, early)


@pytest.mark.parametrize("mode", MODES, ids=_mode_id)
@pytest.mark.parametrize("model", ["gpt2-offline", "tiny"])
def test_fused_step_matches_hf_generate(model, mode, tiny, workdir):
    run = _run(workdir, torch_dir=tiny if model == "tiny" else None, graph=mode[0], compiled=mode[1])
    with backend_steps(run, "frameworks") as (_, steps):
        assert type(steps.fused).__name__ == "FusedGPT2Step"
        assert steps.fused.settings == DECODER_SETTINGS  # the decoder families' default settings
        _check_parity(run, steps)


@pytest.mark.skipif(DEVICE != "cuda", reason="programmatic dependent launch is CUDA's (compute capability 9.0+)")
@pytest.mark.parametrize("early", ["unnormed", "all", "none"])
@pytest.mark.parametrize("model", ["gpt2-offline", "tiny"])
def test_programmatic_launch_gives_hf_tokens(model, early, tiny, workdir, monkeypatch):
    """The compiled step on our kernels replayed from a CUDA graph, every kernel launched with programmatic
    dependent launch (inductor's and ours, each waiting on the device for the one before; ours letting the next
    start as they start or after their loads, `EARLY_LAUNCH`): HF generate's tokens."""
    import torch

    from NNDF.backends.torch import compile as compile_options

    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs compute capability 9.0 or later")
    monkeypatch.setattr(compile_options, "PROGRAMMATIC_LAUNCH", True)
    monkeypatch.setattr(compile_options, "EARLY_LAUNCH", early)
    torch._dynamo.reset()  # compiled afresh, with inductor's PDL code
    run = _run(workdir, torch_dir=tiny if model == "tiny" else None, graph=True, compiled=True)
    with backend_steps(run, "frameworks") as (_, steps):
        _check_parity(run, steps)
    torch._dynamo.reset()


def test_programmatic_launch_only_where_it_runs(monkeypatch):
    """Programmatic dependent launch, even when on, is never asked of a device without it (the CPU here): inductor's
    options stay its own and our kernels launch plainly."""
    from NNDF.backends.torch import compile as compile_options
    import torch

    from NNDF.backends.torch.kernels import _launch

    monkeypatch.setattr(compile_options, "PROGRAMMATIC_LAUNCH", True)
    assert compile_options.step_options("default", "cpu") == {}
    assert compile_options.step_options("max-autotune", "cpu") == COMPILE_OPTIONS["max-autotune"]
    assert _launch(torch.device("cpu")) == dict(PDL=False, EARLY=False)


@pytest.mark.parametrize("setting,plain,normalising", [("unnormed", True, False), ("all", True, True),
                                                       ("none", False, False)])
def test_early_launch_setting(setting, plain, normalising, monkeypatch):
    """Where programmatic launch runs, `EARLY_LAUNCH` says which of our kernels let the next start as they start:
    by default all but the GEMVs that normalise their input."""
    import torch

    from NNDF.backends.torch import compile as compile_options
    from NNDF.backends.torch import kernels

    assert compile_options.EARLY_LAUNCH == "unnormed"
    monkeypatch.setattr(kernels, "programmatic_launch", lambda device: True)
    monkeypatch.setattr(compile_options, "EARLY_LAUNCH", setting)
    device = torch.device("cpu")
    assert kernels._launch(device) == dict(PDL=True, EARLY=plain, launch_pdl=True)
    assert kernels._launch(device, norm=True) == dict(PDL=True, EARLY=normalising, launch_pdl=True)


@pytest.mark.parametrize("mode", MODES, ids=_mode_id)
@pytest.mark.parametrize("settings", [dict(attention="sdpa"), dict(fold_norms=True)], ids=["sdpa", "fold-norms"])
def test_step_settings_match_hf_generate(settings, mode, tiny, workdir):
    """The step's other internal choices (`FusedSettings`), which the device benchmark compares: SDPA for the
    one-query attention, layer norms folded into the products that follow them."""
    from GPT2.fused_decode import FusedGPT2Step

    run = _run(workdir, torch_dir=tiny, fused=False)
    model = run.torch_model()
    options = COMPILE_OPTIONS["default"] if mode[1] else None
    fused = FusedGPT2Step(model, options, FusedSettings(**settings))
    _check_parity(run, TorchSteps(model, True, static_cache=True, cuda_graph=mode[0], fused=fused))


def test_step_on_our_kernels(tiny, workdir, monkeypatch):
    """GPT-2's step on our Triton GEMV and attention kernels (the default on CUDA) gives HF generate's tokens."""
    run = _run(workdir, torch_dir=tiny)
    with backend_steps(run, "frameworks") as (_, steps):
        _check_kernels(run, steps, monkeypatch, fusion=True)


@pytest.mark.skipif(DEVICE == "cuda", reason="on CUDA the compiled step runs in the parity tests")
def test_compiled_step_on_cpu(tiny, workdir):
    """torch.compile of the three step functions on the CPU: greedy (3 rows: one-row products in the reduction
    form) and beam search (9 rows: F.linear), as HF generate."""
    run = _run(workdir, torch_dir=tiny, compiled=True)
    with backend_steps(run, "frameworks") as (_, steps):
        assert steps.fused.compiled and steps.fused.settings.reduces(3, True)
        prompt, eos = encode(run, PROMPTS), run.tokenizer.eos_token_id
        for beams in (1, 3):
            assert _fused_tokens(run, steps, prompt, beams, eos) == _hf_tokens(run, prompt, beams, eos)


def _refusal(out) -> str:
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    return out.stderr.strip().splitlines()[-1]


@pytest.mark.skipif(DEVICE == "cuda", reason="refusals are checked on the CPU")
def test_model_types_without_a_fused_step_refuse_it(workdir, capsys):
    out = cli_in_process(capsys, "benchmark", "GPT2", "frameworks", "--variant", "gpt-neo-offline", "--use-cache",
                         "--static-cache", "--fused-decode", "--cpu", "--working-dir", str(workdir))
    assert re.fullmatch(r"error: --fused-decode: the frameworks backend has no fused decode step for model type "
                        r"'gpt_neo' \(fused steps exist for (.*; )?frameworks: (\w+, )*gpt2(, \w+)*(; .*)?\); drop --fused-decode",
                        _refusal(out))
    with pytest.raises(UsageError, match=r"no fused decode step for model type 'gpt_neo' \(fused steps exist for "
                                         r"(.*; )?frameworks: (\w+, )*gpt2"):
        open_run("GPT2", ModelOptions(variant="gpt-neo-offline", use_cache=True, static_cache=True, fused_decode=True,
                                      cpu=True, working_dir=str(workdir)), ("frameworks",))


@pytest.mark.skipif(DEVICE == "cuda", reason="refusals are checked on the CPU")
def test_unsupported_gpt2_config_is_refused(tmp_path, workdir, capsys):
    folder = _tiny_dir(tmp_path / "inverse-idx", scale_attn_by_inverse_layer_idx=True)
    out = cli_in_process(capsys, "benchmark", "GPT2", "frameworks", "--torch-dir", folder, "--use-cache",
                         "--static-cache", "--fused-decode", "--cpu", "--working-dir", str(workdir), "--iterations",
                         "1")
    assert _refusal(out) == ("error: --fused-decode: this GPT-2 config sets scale_attn_by_inverse_layer_idx, which "
                             "the fused step does not implement; drop --fused-decode")
