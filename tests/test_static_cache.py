"""The static KV cache (and, on CUDA, the CUDA-graph step) produces the same tokens as the same backend with its
plain growing cache (onnxrt: the torch.onnx static-cache export, `--no-fused-decode`; the fused graphs it takes by
default have their own tests): padded batches, greedy and beam search (prompt expansion to more rows, in-place beam
reordering), EOS mid-way, and a second generation reusing the pooled buffers (and captured graph). Each path's
steps are opened once per case and serve all its generations (the reference path's generations run once each).

On the CPU this runs the static cache alone; `tools/bench/speed_check.sh` runs it with HARNESS_TEST_DEVICE=cuda,
where the CUDA-graph variants (and torch.compile for frameworks) join in.
"""
import json
import os

import numpy as np
import pytest

from NNDF import registry
from NNDF.actions.common import backend_steps, encode, generate_prompt
from NNDF.context import make_context
from NNDF.errors import UsageError
from NNDF.generation import GenerationConfig
from NNDF.options import ModelOptions

from conftest import cli_in_process, generate_twice, offline_variants

DEVICE = os.environ.get("HARNESS_TEST_DEVICE", "cpu")
PROMPTS = ["The for statement is used to", "A", "Names refer to objects and the"]
NEW = 12
DECODERS = [v for v in offline_variants() if registry.family(v[0]).kind == "decoder"]
# (static_cache, use_cuda_graph, torch_compile) per backend and device
MODES = {"frameworks": [(True, False, False)] + ([(True, True, False), (True, True, True)] if DEVICE == "cuda" else []),
         "onnxrt": [(True, False, False)] + ([(True, True, False)] if DEVICE == "cuda" else [])}
# torch.compile takes seconds per shape: one variant is enough to show the compiled graph gives the same tokens
COMPILED = {("GPT2", "gpt2-offline")}
# onnxrt's static export (a non-default path, ~12 s a variant on the CPU) runs HF's own layers over the cache, so
# what differs between the LLAMA family's model types there is how their layers use it: every layer full-length
# (llama-offline), every layer windowed (Mistral, Phi-3), windowed and full layers mixed (Gemma 2 and 3). Llama 3's
# rope scaling, Qwen's biases and head norms and Gemma's norms are the same export as the plain one of test_parity.py
STATIC_EXPORT_SKIPPED = {("LLAMA", v) for v in ("llama3-offline", "qwen2-offline", "qwen3-offline", "gemma-offline")}
assert STATIC_EXPORT_SKIPPED <= set(DECODERS), STATIC_EXPORT_SKIPPED - set(DECODERS)  # no stale name
CASES = [(v, b, m) for v in DECODERS for b, modes in MODES.items() for m in modes
         if (not m[2] or v in COMPILED) and not (b == "onnxrt" and v in STATIC_EXPORT_SKIPPED)]


def _case_id(case) -> str:
    (family, name), backend, mode = case
    return f"{backend}-{'-'.join(n for n, on in zip(('static', 'graph', 'compile'), mode) if on)}-{family}-{name}"


def _tokens(run, backend, prompts, beams, eos):
    with backend_steps(run, backend) as (_, steps):
        return generate_twice(run, steps, encode(run, prompts), NEW, beams, eos)


def _run(family, name, workdir, static=False, graph=False, compiled=False):
    return make_context(registry.family(family), ModelOptions(
        variant=name, working_dir=str(workdir), batch_size=3, use_cache=True, use_mask=True, device=DEVICE,
        static_cache=static, use_cuda_graph=graph, torch_compile=compiled, fused_decode=False))


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_static_cache_same_tokens(case, workdir):
    (family, name), backend, mode = case
    plain, static = _run(family, name, workdir), _run(family, name, workdir, *mode)
    if not plain.torch_model()._can_compile_fullgraph:  # HF's own static cache gives wrong tokens (GPT-Neo)
        with pytest.raises(UsageError, match="does not support a static KV cache"):
            _tokens(static, backend, PROMPTS, 1, None)
        return
    eos = plain.tokenizer.eos_token_id
    prompt, static_prompt = encode(plain, PROMPTS), encode(static, PROMPTS)
    # each path's steps are opened once and serve every generation below (their slots pooled across beams and EOS)
    try:
        with backend_steps(plain, backend) as (_, plain_steps), backend_steps(static, backend) as (_, static_steps):
            for beams in (1, 3):
                expected = _generate(plain, plain_steps, prompt, beams, eos)
                got = generate_twice(static, static_steps, static_prompt, NEW, beams, eos)
                assert got == expected, f"beams={beams}"
            # EOS mid-generation: a token the greedy search emits early becomes the EOS, so rows stop at different
            # steps
            early = expected[0][2]
            for beams in (1, 3):
                assert generate_twice(static, static_steps, static_prompt, NEW, beams, early) == \
                    _generate(plain, plain_steps, prompt, beams, early), f"EOS case, beams={beams}"
    except UsageError as exc:  # seen on transformers 5.17 (GPT-J, BLOOM: eager attention); 5.23 captures them
        assert "cannot be captured with transformers" in str(exc)
        pytest.skip(str(exc))


def _generate(run, steps, prompt, beams, eos):
    """One generation on the plain growing cache (the reference)."""
    config = GenerationConfig(max_new_tokens=NEW, num_beams=beams, eos_token_id=eos,
                              pad_token_id=run.tokenizer.pad_token_id)
    result = generate_prompt(steps, prompt, config)
    return [result.new_tokens(r, eos) for r in range(prompt.batch)]


def test_static_cache_option_rules(workdir):
    with pytest.raises(UsageError, match="--static-cache is a kind of KV cache: it contradicts --no-use-cache"):
        ModelOptions(static_cache=True, use_cache=False)
    with pytest.raises(UsageError, match="--torch-compile needs --static-cache"):
        ModelOptions(use_cache=True, torch_compile=True).check_graph_needs_static("frameworks")
    with pytest.raises(UsageError, match="--compile-mode max-autotune needs --torch-compile"):
        ModelOptions(use_cache=True, static_cache=True, compile_mode="max-autotune")
    with pytest.raises(UsageError, match=r"--static-cache is not implemented for BERT \(encoder models\): encoder models have no KV cache"):
        make_context(registry.family("BERT"), ModelOptions(static_cache=True, working_dir=str(workdir)))


@pytest.mark.skipif(DEVICE == "cuda", reason="on CUDA the compiled graph runs in test_static_cache_same_tokens")
def test_autotuned_compile_keeps_tokens(workdir):
    """--compile-mode max-autotune (inductor's autotuning and coordinate-descent tuning; the CPU's C++ kernels
    here, fp32) gives the plain path's greedy tokens, twice over the same compiled step."""
    plain = _run("GPT2", "gpt2-offline", workdir)
    tuned = make_context(registry.family("GPT2"), ModelOptions(
        variant="gpt2-offline", working_dir=str(workdir), use_cache=True, device=DEVICE, static_cache=True,
        torch_compile=True, compile_mode="max-autotune"))
    eos = plain.tokenizer.eos_token_id
    assert _tokens(tuned, "frameworks", PROMPTS[:1], 1, eos) == _tokens(plain, "frameworks", PROMPTS[:1], 1, eos)


@pytest.mark.skipif(DEVICE == "cuda", reason="checks the CPU refusal")
def test_cuda_graph_needs_cuda_cli(workdir, capsys):
    out = cli_in_process(capsys, "benchmark", "GPT2", "frameworks", "--use-cache", "--static-cache", "--use-cuda-graph",
                         "--cpu", "--working-dir", str(workdir))
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines()[-1] == \
        "error: --use-cuda-graph needs --device cuda (CUDA graphs are a GPU feature)"
    assert "Traceback" not in out.stderr


def test_benchmark_beyond_position_table_is_refused(workdir, capsys):
    """On CUDA this would be a device-side assert that poisons the process (seen on the H200)."""
    out = cli_in_process(capsys, "benchmark", "GPT2", "frameworks", "--use-cache", "--cpu", "--input-seq-len", "200",
                         "--output-seq-len", "100", "--working-dir", str(workdir))
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines()[-1] == \
        "error: --input-seq-len 200 + --output-seq-len 100 exceeds gpt2-offline's 256 positions; shorten them"
    out = cli_in_process(capsys, "benchmark", "GPT2", "frameworks", "--cpu", "--input-seq-len", "200",
                         "--working-dir", str(workdir))  # the other length left to its default: said so
    assert out.returncode == 2 and out.stderr.strip().splitlines()[-1] == (
        "error: --input-seq-len 200 + --output-seq-len 256 exceeds gpt2-offline's 256 positions; shorten them "
        "(--output-seq-len 256 is the default)")


@pytest.mark.parametrize("family,lengths,expect", [
    ("BLIP", ("40", "30"), "--input-seq-len 40 + --output-seq-len 30 exceeds blip-offline's 64 positions"),
    ("BART", ("300", "8"), "--input-seq-len 300 exceeds bart-offline's 256 encoder positions; shorten it"),
    ("BART", ("8", "256"), "--output-seq-len 256 (after the decoder's start token) exceeds bart-offline's 256 "
                           "decoder positions; shorten it"),
])
def test_benchmark_beyond_other_position_tables_is_refused(family, lengths, expect, workdir, capsys):
    """BLIP's text decoder holds the prompt and the caption; BART's encoder and decoder have a table each."""
    out = cli_in_process(capsys, "benchmark", family, "frameworks", "--use-cache", "--cpu", "--input-seq-len",
                         lengths[0], "--output-seq-len", lengths[1], "--working-dir", str(workdir))
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith(f"error: {expect}")
    assert "Traceback" not in out.stderr


def test_default_lengths_fit_the_position_table(workdir, tmp_path, capsys):
    """Left to their defaults (128 + 256), the lengths are halved together until they fit gpt2-offline's 256
    positions, and the report says what was measured; given lengths are never changed (test above). In process:
    benchmark through run.py is test_cli.py's."""
    path = tmp_path / "bench.json"
    out = cli_in_process(capsys, "benchmark", "GPT2", "frameworks", "--use-cache", "--cpu", "--iterations", "1",
                         "--warmup", "0", "--working-dir", str(workdir), "--json", str(path))
    assert out.returncode == 0, out.stderr
    data = json.loads(path.read_text())
    assert (data["settings"]["input_seq_len"], data["settings"]["output_seq_len"]) == (64, 128)
    assert "the defaults 128 + 256 do not fit gpt2-offline's positions; measured 64 + 128" in out.stdout
    tpot = (np.array(data["results"][0]["e2e_ms"]["samples"]) - data["results"][0]["prefill_ms"]["samples"]) / 127
    assert data["results"][0]["tpot_ms"]["samples"] == pytest.approx(list(tpot))
