"""Encoder-decoders with `--static-cache` (the family's fused decoder step on frameworks, its graphs built from the
weights on onnxrt): token-for-token parity with HF `generate` (CPU, fp32) through the shared loop — greedy and 3
beams on a padded encoder batch, EOS mid-generation, every row alone — and a second generation on the same pooled
buffers giving the same tokens (the EOS cases run once: their slots are those the cases before them made and
reused). HF's rows come from the session's `hf_rows` (tests/conftest.py), shared with test_parity.py. Refusals by
message."""
import os

import pytest

from NNDF import registry
from NNDF.actions.common import backend_steps, encode, generate_prompt
from NNDF.context import make_context
from NNDF.errors import UsageError
from NNDF.generation import GenerationConfig
from NNDF.options import ModelOptions

from conftest import generate_twice
from test_parity import NEW, _hf

DEVICE = os.environ.get("HARNESS_TEST_DEVICE", "cpu")
PROMPTS = ["The for statement is used to", "A", "Names refer to objects and the"]
VARIANTS = [("T5", "t5-offline"), ("T5", "flan-t5-offline"), ("BART", "bart-offline"), ("BART", "mbart-offline")]


def _run(family, variant, workdir, **options):
    return make_context(registry.family(family), ModelOptions(
        variant=variant, working_dir=str(workdir), batch_size=3, use_cache=True, static_cache=True, use_mask=True,
        device=DEVICE, **options))


def _ours(run, steps, prompt, beams, eos):
    forced = run.source.generation.forced_bos_token_id
    return generate_twice(run, steps, prompt, NEW, beams, eos, forced_bos_token_id=forced)


def _ours_once(run, steps, prompt, beams, eos):
    """One generation: for the EOS cases, whose slots the cases before them already made and reused."""
    config = GenerationConfig(max_new_tokens=NEW, num_beams=beams, eos_token_id=eos,
                              pad_token_id=run.tokenizer.pad_token_id,
                              forced_bos_token_id=run.source.generation.forced_bos_token_id)
    result = generate_prompt(steps, prompt, config)
    return [result.new_tokens(r, eos) for r in range(prompt.batch)]


@pytest.mark.parametrize("backend", ["frameworks", "onnxrt"])
@pytest.mark.parametrize("family,variant", VARIANTS)
def test_static_cache_gives_hf_tokens(family, variant, backend, workdir, hf_rows):
    if DEVICE == "cuda" and backend == "onnxrt":
        pytest.skip("onnxrt's built graphs run fp16 only on CUDA (GroupQueryAttention); fp32 parity is the CPU's")
    run = _run(family, variant, workdir)
    prompt = encode(run, PROMPTS)
    assert not prompt.encoder["attention_mask"].all(), "the prompts must need padding"
    model, tok = run.torch_model(), run.tokenizer
    eos, pad = tok.eos_token_id, tok.pad_token_id

    def hf(texts, beams, eos):  # HF's rows, shared with test_parity.py's cases of the same variant
        return hf_rows((family, variant), texts, model, encode(run, texts), beams, True, eos, pad)

    with backend_steps(run, registry.backend(run.family, backend)) as (_, steps):
        for beams in (1, 3):
            expected = hf(PROMPTS, beams, eos)
            assert _ours(run, steps, prompt, beams, eos) == expected, f"beams={beams}"
        for r in range(len(PROMPTS)):  # each row alone (another slot shape) gives its padded batch row's tokens
            alone = _ours(run, steps, encode(run, PROMPTS[r:r + 1]), 1, eos)
            assert alone == hf(PROMPTS[r:r + 1], 1, eos), f"row {r}"
        early = hf(PROMPTS, 1, None)[0][3]  # a token greedy emits early becomes the EOS
        for beams in (1, 3):
            expected = hf(PROMPTS, beams, early)
            assert _ours_once(run, steps, prompt, beams, early) == expected, f"EOS case, beams={beams}"


@pytest.mark.parametrize("family,variant", [("T5", "flan-t5-offline"), ("BART", "bart-offline")])
def test_default_step_on_our_kernels_gives_hf_tokens(family, variant, workdir, hf_rows, monkeypatch):
    """The encoder-decoder steps' default settings as they run on CUDA (`Seq2Seq.fused_step.SEQ2SEQ_SETTINGS`,
    here with our Triton kernels under Triton's interpreter): one row through our GEMV and one attention program
    per head; a padded batch of 3 through our GEMV's dot form, still one attention program per row and head; its
    3 beams (9 rows, above `gemv_rows` and `split_rows`) through F.linear and the split attention; HF's tokens."""
    from dataclasses import replace

    from Seq2Seq import fused_step
    from conftest import counted_kernels

    monkeypatch.setattr(fused_step, "SEQ2SEQ_SETTINGS", replace(fused_step.SEQ2SEQ_SETTINGS, kernels_everywhere=True))
    run = _run(family, variant, workdir)
    model, tok = run.torch_model(), run.tokenizer
    eos, pad = tok.eos_token_id, tok.pad_token_id
    calls = counted_kernels(monkeypatch)
    with backend_steps(run, registry.backend(run.family, "frameworks")) as (_, steps):
        alone = encode(run, PROMPTS[:1])
        assert _ours_once(run, steps, alone, 1, eos) == hf_rows((family, variant), PROMPTS[:1], model, alone, 1,
                                                                True, eos, pad)
        assert calls["gemv"] and calls["decode_attention"] and not calls["decode_attention_split"], calls
        gemv = calls["gemv"]
        prompt = encode(run, PROMPTS)
        for beams, few in ((1, True), (3, False)):  # 3 rows: our GEMV, one program; 9: F.linear, split
            assert _ours_once(run, steps, prompt, beams, eos) == hf_rows((family, variant), PROMPTS, model, prompt,
                                                                         beams, True, eos, pad), f"beams={beams}"
            assert (calls["gemv"] > gemv) == few and bool(calls["decode_attention_split"]) != few, (beams, calls)
            gemv = calls["gemv"]


@pytest.mark.skipif(DEVICE != "cuda", reason="CUDA graphs need CUDA; compiled on the CPU in test_t5_fused.py etc.")
@pytest.mark.parametrize("launch", ["plain", "programmatic"])
@pytest.mark.parametrize("family,variant", VARIANTS)
def test_captured_compiled_step_gives_hf_tokens(family, variant, launch, workdir, monkeypatch):
    """fp32 on CUDA: the compiled one-token step replayed from a CUDA graph gives HF's tokens (greedy, 3 beams),
    with every kernel launched with programmatic dependent launch (the default, compute capability 9.0+; ours
    letting the next kernel start as they start, `EARLY_LAUNCH`) and without."""
    import torch

    from NNDF.backends.torch import compile as compile_options

    if launch == "programmatic" and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs compute capability 9.0 or later")
    monkeypatch.setattr(compile_options, "PROGRAMMATIC_LAUNCH", launch == "programmatic")
    torch._dynamo.reset()  # compiled afresh, with or without inductor's PDL code
    run = _run(family, variant, workdir, use_cuda_graph=True, torch_compile=True)
    prompt = encode(run, PROMPTS)
    model, tok = run.torch_model(), run.tokenizer
    with backend_steps(run, registry.backend(run.family, "frameworks")) as (_, steps):
        for beams in (1, 3):
            expected = _hf(model, prompt, beams, True, tok.eos_token_id, tok.pad_token_id)
            assert _ours(run, steps, prompt, beams, tok.eos_token_id) == expected, f"beams={beams}"


def test_static_cache_refusals(workdir):
    run = _run("T5", "t5-offline", workdir, fused_decode=False)
    with pytest.raises(UsageError, match="--no-fused-decode: an encoder-decoder's static cache on frameworks is "
                                         "the family's fused step"):
        with backend_steps(run, registry.backend(run.family, "frameworks")):
            pass
    with pytest.raises(UsageError, match="--no-fused-decode: trt --static-cache engines are built from the "
                                         "family's static-cache step"):
        registry.backend(run.family, "trt").kind.shapes(run)


def test_benchmark_static_rows_and_hf_baseline(workdir):
    """`benchmark --static-cache --hf-baseline` on an image-to-text model: our static-cache row runs, and HF's static
    baseline, which transformers' captioning generate cannot run (it overruns its own static cache), is replaced
    by HF's growing-cache row with a note saying so."""
    from NNDF.actions.benchmark import benchmark
    from NNDF.options import BenchmarkOptions, SamplingOptions, TimingOptions

    report = benchmark("BLIP", ("frameworks",), ModelOptions(
        variant="blip-offline", working_dir=str(workdir), device=DEVICE, use_cache=True, static_cache=True),
        SamplingOptions(), TimingOptions(iterations=1, warmup=0),
        BenchmarkOptions(input_seq_len=4, output_seq_len=4, hf_baseline=True))
    assert [r.backend for r in report.results] == ["hf-generate", "frameworks"]
    assert any("hf-generate-static not run (transformers' captioning generate overruns" in n for n in report.notes)
    assert all(r.tpot_ms.p50 > 0 and r.weight_bytes for r in report.results)
