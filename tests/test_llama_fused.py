"""The LLAMA family's fused decode step (`--fused-decode` on frameworks, LLAMA/fused_decode.py) gives HF
`generate`'s tokens, token for token in fp32, on every offline variant of the family: grouped-query attention,
llama3 rope scaling (llama3-offline), Mistral's sliding window shorter than prompt + new tokens (mistral-offline),
Qwen2's q/k/v biases and tied head (qwen2-offline), Qwen3's head norms and a head size other than hidden / heads
(qwen3-offline), Phi-3's fused projections (phi3-offline); greedy and beam
search, a left-padded batch of three prompt lengths, EOS mid-way, a second generation on the same buffers;
compiled once on the CPU. Configs the step does not reproduce refuse the flag in one line, exit 2.

With HARNESS_TEST_DEVICE=cuda the parity cases also run the step from a CUDA graph, eager and compiled.
"""
import json
import os
import shutil

import pytest

from NNDF import registry
from NNDF.actions.common import backend_steps, encode

from conftest import cli_in_process, counted_kernels, generate_tokens, offline_variants
from test_fused_decode import MODES, NEW, PROMPTS, _check_parity, _fused_tokens, _hf_tokens, _mode_id, _refusal, _run

DEVICE = os.environ.get("HARNESS_TEST_DEVICE", "cpu")  # off CUDA our Triton kernels run interpreted (conftest.py)
# the offline variants whose model type has a fused step (Gemma and Gemma 2 run the plain paths: their refusal is
# below)
VARIANTS = [name for family, name in offline_variants() if family == "LLAMA"
            and name not in ("gemma-offline", "gemma2-offline")]


@pytest.mark.parametrize("mode", MODES, ids=_mode_id)
@pytest.mark.parametrize("variant", VARIANTS)
def test_fused_step_matches_hf_generate(variant, mode, workdir):
    run = _run(workdir, variant=variant, family="LLAMA", graph=mode[0], compiled=mode[1])
    with backend_steps(run, "frameworks") as (_, steps):
        assert type(steps.fused).__name__ == ("FusedGemmaStep" if variant == "gemma3-offline" else "FusedLlamaStep")
        if variant == "mistral-offline":  # the window is shorter than the longest prompt + the new tokens
            longest = int(encode(run, PROMPTS).attention_mask.sum(1).max())
            assert steps.fused.window is not None and steps.fused.window < longest + NEW
        _check_parity(run, steps)


@pytest.mark.parametrize("variant", ["qwen3-offline", "gemma3-offline"])
def test_norm_gains_drawn(variant, workdir):
    """Every RMS norm's gain drawn, the query and key heads' own included (the random variants keep HF's initial
    ones: ones, or Gemma's zeros of its 1 + weight, which a gain read wrongly would not show): HF generate's
    tokens."""
    import torch

    run = _run(workdir, variant=variant, family="LLAMA")
    model = run.torch_model()
    generator = torch.Generator().manual_seed(0)
    drawn = 0
    with torch.no_grad():
        for module in model.modules():
            if type(module).__name__.endswith("RMSNorm"):
                base = 0.0 if type(module).__name__.startswith("Gemma") else 1.0
                gains = base + 0.5 * torch.randn(module.weight.shape, generator=generator)
                module.weight.copy_(gains.to(module.weight.device, module.weight.dtype))
                drawn += 1
    assert drawn == 1 + 4 * len(model.model.layers) if variant == "qwen3-offline" else 1 + 6 * len(model.model.layers)
    with backend_steps(run, "frameworks") as (_, steps):
        assert steps.fused.layers[0][3] is not None  # the heads' norm gains
        _check_parity(run, steps)


def test_gemma3_step_on_our_kernels(workdir, monkeypatch):
    """Gemma 3's step with our Triton GEMV and attention kernels for every product and both layer types (a
    window's columns, the whole buffer; on the CPU under Triton's interpreter): HF generate's tokens, greedy and 3
    beams (EOS mid-way is the loop's, checked on the default step in test_fused_step_matches_hf_generate)."""
    from CausalLM.fused_step import FusedSettings

    calls = counted_kernels(monkeypatch)
    run = _run(workdir, variant="gemma3-offline", family="LLAMA", compiled=DEVICE == "cuda", graph=DEVICE == "cuda")
    with backend_steps(run, "frameworks") as (_, steps):
        steps.fused.settings = FusedSettings(gemv_above=0, gemv_rows=4, gemv_head=True, attention="kernel",
                                             kernels_everywhere=True)
        prompt, eos = encode(run, PROMPTS), run.tokenizer.eos_token_id
        for beams in (1, 3):
            assert _kernel_tokens(run, steps, prompt, beams, eos) == _hf_tokens(run, prompt, beams, eos)
    assert calls["gemv"] and calls["decode_attention"], calls


def _kernel_tokens(run, steps, prompt, beams, eos):
    """Our loop's tokens on a step that runs our Triton kernels: on the CPU one generation (each takes seconds under
    Triton's interpreter; a second generation on the same pooled buffers is checked on the default step, in
    test_fused_step_matches_hf_generate), on CUDA twice (the second replays the captured graph)."""
    return generate_tokens(run, steps, prompt, NEW, beams, eos, times=2 if DEVICE == "cuda" else 1)


@pytest.mark.skipif(DEVICE == "cuda", reason="on CUDA the compiled step runs in the parity tests")
def test_compiled_step_on_cpu(workdir):
    """torch.compile of the three step functions on the CPU (3 rows: the reduction form of the products; 9 beam
    rows: F.linear), on the sliding-window variant."""
    run = _run(workdir, variant="mistral-offline", family="LLAMA", compiled=True)
    with backend_steps(run, "frameworks") as (_, steps):
        assert steps.fused.compiled and steps.fused.settings.reduces(3, True)
        prompt, eos = encode(run, PROMPTS), run.tokenizer.eos_token_id
        for beams in (1, 3):
            assert _fused_tokens(run, steps, prompt, beams, eos) == _hf_tokens(run, prompt, beams, eos)


@pytest.mark.parametrize("settings, compiled", [
    (dict(split_above=64, splits=4, transposed_values=True, fold_norms=True), True),
    (dict(attention="sdpa"), False),
    (dict(attention="sdpa", transposed_values=True), False),
    # compiled on CUDA; eager on the CPU (test_torch_kernels checks that they trace without graph breaks)
    (dict(gemv_above=0, gemv_rows=4, gemv_head=True, attention="kernel", kernels_everywhere=True), DEVICE == "cuda"),
    (dict(attention="split", kernels_everywhere=True), DEVICE == "cuda"),
    (dict(gemv_above=0, gemv_rows=4, attention="kernel", kernels_everywhere=True, gemv_fusion=("mistral",)),
     DEVICE == "cuda"),
], ids=["split-transposed-folded-compiled", "sdpa", "sdpa-transposed", "triton-kernels", "split-attention",
        "triton-kernels-fused"])
def test_step_settings_give_the_same_tokens(settings, compiled, workdir, monkeypatch):
    """The step's other internal choices (`FusedSettings`, which the device benchmark compares): long products
    summed in parts (down's 128 features in 4 parts of 32; compiled: eager runs F.linear), norms folded into the
    reduction-form products that follow them, V buffers stored transposed, SDPA for the one-query attention, our
    Triton GEMV and attention kernels (`NNDF.backends.torch.kernels`; on the CPU under Triton's interpreter), with
    the norms, SwiGLU and residual adds inside the GEMV (`gemv_fusion`); greedy and 3 beams on mistral-offline (its
    sliding window exceeded), against HF generate."""
    from CausalLM.fused_step import GEMV, FusedSettings

    calls = counted_kernels(monkeypatch)

    run = _run(workdir, variant="mistral-offline", family="LLAMA", compiled=compiled, graph=DEVICE == "cuda")
    with backend_steps(run, "frameworks") as (_, steps):
        steps.fused.settings = FusedSettings(**settings)
        if "gemv_above" in settings:  # our GEMV kernel for every product of 3 rows (gemv_rows 4), compiled or not
            assert steps.fused.settings.form(3, compiled, 64, 128, run.device) == GEMV
            assert steps.fused.settings.head_form(3, compiled, 64, run.device) == GEMV
        elif "split_above" in settings:  # long sums in parts (compiled)
            assert steps.fused.settings.form(3, True, 64, 128) == 4 and steps.fused.settings.form(3, True, 64, 64) == 1
        prompt, eos = encode(run, PROMPTS), run.tokenizer.eos_token_id
        tokens = _kernel_tokens if settings.get("kernels_everywhere") else _fused_tokens
        for beams in (1, 3):
            assert tokens(run, steps, prompt, beams, eos) == _hf_tokens(run, prompt, beams, eos)
        slot = steps.fused.new_slot(1, 16)
        assert slot.past[1].shape[-1] == (16 if settings.get("transposed_values") else steps.fused.head_dim)
    fused = ("norm", "activation", "residual")
    if settings.get("gemv_fusion"):
        assert all(calls[f"gemv+{part}"] for part in fused), calls
    else:
        assert not any(calls[f"gemv+{part}"] for part in fused), calls


def test_compiled_prompt_pass_matches_eager(workdir):
    """The prompt pass's layer function compiled (what `prompt_function` makes of it on CUDA; here on the CPU, in one
    graph: no break) gives eager's logits and K/V buffers at prompts of other lengths and rows (recompiled for
    them, once dynamic), a left-padded batch and a pass that starts at column 3; on qwen3-offline's head norms,
    on the test device. On the CPU the step itself keeps the eager prompt pass."""
    import torch

    from CausalLM.fused_step import prompt_function

    run = _run(workdir, variant="qwen3-offline", family="LLAMA")
    with backend_steps(run, "frameworks") as (_, steps):
        # on CUDA the step's prompt pass is already compiled (`prompt_function`): the function it compiled
        fused = steps.fused
        eager = getattr(fused._prompt, "_torchdynamo_orig_callable", fused._prompt)
        assert prompt_function(eager, True, torch.device("cpu"), fused.settings) is eager
        # dynamo counts recompiles per code object across every compile of it: on CUDA the steps of this file's
        # earlier tests compiled `eager` for their own models and shapes, which must not count against this one
        torch._dynamo.reset()
        compiled = torch.compile(eager, fullgraph=True)
        generator = torch.Generator().manual_seed(0)
        for rows, length, total in ((1, 12, 12), (1, 7, 7), (3, 9, 9), (2, 5, 8)):
            mask = torch.ones(rows, total, dtype=torch.long)
            mask[-1, :2] = 0
            ids = torch.randint(0, run.source.config.vocab_size, (rows, length), generator=generator)
            positions = (mask.cumsum(1) - 1).clamp(min=0)[:, -length:]
            mask, ids, positions = (t.to(fused.device) for t in (mask, ids, positions))
            got = []
            for function in (eager, compiled):
                fused._prompt = function
                slot = fused.new_slot(rows, 16)
                got.append((fused.prefill(ids, mask, positions, slot, last_only=False), slot.past))
            (logits, past), (logits_c, past_c) = got
            torch.testing.assert_close(logits_c, logits, rtol=1e-4, atol=1e-4)
            for buffer, buffer_c in zip(past, past_c):
                torch.testing.assert_close(buffer_c, buffer, rtol=1e-4, atol=1e-4)


def test_attention_kernel_leaves_long_buffers_to_inductors_form():
    """Our attention kernel walks its columns in one program: beyond `attention_columns` (the buffer, or the
    window where it is shorter) the step takes the plain-op form, which reads them in parallel; off CUDA too,
    unless the kernels run everywhere (the CPU tests)."""
    import torch

    from CausalLM.fused_step import FusedSettings, triton_kernels

    limit = triton_kernels().attention_columns(16)
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    settings = FusedSettings(attention="kernel")
    assert settings.attention_on(cuda, limit, 16) == "kernel"
    assert settings.attention_on(cuda, limit + 1, 16) == "reduction"
    assert settings.attention_on(cpu, limit, 16) == "reduction"
    assert FusedSettings(attention="kernel", kernels_everywhere=True).attention_on(cpu, limit, 16) == "kernel"
    assert FusedSettings(attention="sdpa").attention_on(cuda, limit + 1, 16) == "sdpa"
    auto, split = FusedSettings(attention="auto"), FusedSettings(attention="split")
    wide = triton_kernels().attention_columns(128)
    assert auto.attention_on(cuda, limit, 16) == auto.attention_on(cuda, 64, 64) == "kernel"  # one program a head
    assert auto.attention_on(cuda, wide, 128) == "kernel" and auto.attention_on(cuda, wide + 1, 128) == "reduction"
    widest = triton_kernels().attention_columns(256)
    assert auto.attention_on(cuda, widest, 256) == "split"  # above split_head_dim
    assert auto.attention_on(cuda, wide, 128, alibi=True) == "split"  # ALiBi (BLOOM)
    assert auto.attention_on(cuda, widest + 1, 256) == "reduction"
    assert auto.attention_on(cpu, 64, 256) == split.attention_on(cpu, 64, 256) == "reduction"
    assert split.attention_on(cuda, 10 * wide, 128) == "split"
    assert triton_kernels().attention_columns(128) < limit  # wider heads: shorter loads
    rows_and_long = FusedSettings(attention="auto", split_rows=1, split_columns=512)
    assert rows_and_long.attention_on(cuda, 512, 64) == "kernel"
    assert rows_and_long.attention_on(cuda, 513, 64) == rows_and_long.attention_on(cuda, 64, 64, rows=2) == "split"
    assert rows_and_long.attention_on(cuda, 100 * wide, 64) == "split"  # past `attention_columns`: split serves
    assert rows_and_long.attention_on(cpu, 577, 64, rows=4) == "reduction"
    assert auto.attention_on(cuda, 64, 64, rows=8) == "kernel"  # the decoder families' default: no row rule
    with pytest.raises(ValueError, match="transposed_values"):
        FusedSettings(attention="kernel", transposed_values=True)


def test_long_buffer_steps_take_the_plain_attention(workdir, monkeypatch):
    """A slot longer than the kernel serves: the step (kernels everywhere, on the CPU) never calls it and still
    gives HF generate's tokens."""
    from CausalLM.fused_step import FusedSettings, triton_kernels

    calls = []
    kernels = triton_kernels()
    attend = kernels.decode_attention
    monkeypatch.setattr(kernels, "decode_attention", lambda *a, **k: calls.append(1) or attend(*a, **k))
    monkeypatch.setattr(kernels, "attention_columns", lambda dim: 8)  # shorter than any of these generations
    run = _run(workdir, variant="llama-offline", family="LLAMA", compiled=False, graph=False)
    with backend_steps(run, "frameworks") as (_, steps):
        steps.fused.settings = FusedSettings(attention="kernel", kernels_everywhere=True)
        prompt, eos = encode(run, PROMPTS), run.tokenizer.eos_token_id
        assert _fused_tokens(run, steps, prompt, 1, eos) == _hf_tokens(run, prompt, 1, eos)
    assert not calls


def test_folded_norm_product_agrees():
    """`norm_product` folded (the norm's statistics beside the product) gives rms_norm then the product."""
    import torch

    from LLAMA.fused_decode import norm_product, product, rms_norm

    gen = torch.Generator().manual_seed(1)
    x, g, w, b = (torch.randn(*shape, generator=gen) for shape in ((3, 96), (96,), (40, 96), (40,)))
    expected = product(rms_norm(x, g, 1e-6), w, b, 1)
    torch.testing.assert_close(norm_product(x, g, w, b, 1e-6, 1, True), expected, rtol=1e-5, atol=1e-5)


def test_product_forms_agree():
    """`product`'s forms give F.linear's result: one reduction, the sum in parts, with and without a bias."""
    import torch

    from CausalLM.fused_step import product

    gen = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(*shape, generator=gen) for shape in ((3, 96), (40, 96), (40,)))
    for bias in (b, None):
        expected = torch.nn.functional.linear(x, w, bias)
        for form in (1, 4, 8):
            torch.testing.assert_close(product(x, w, bias, form), expected, rtol=1e-5, atol=1e-5)


def _edited_copy(run, folder, **fields):
    """The variant's HF folder copied with these config.json fields changed."""
    shutil.copytree(run.source.location, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(fields)
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


@pytest.mark.skipif(DEVICE == "cuda", reason="refusals are checked on the CPU")
def test_unsupported_configs_are_refused(tmp_path, workdir, capsys):
    base = _run(workdir, variant="llama3-offline", family="LLAMA", fused=False)
    dynamic = _edited_copy(base, tmp_path / "dynamic", rope_parameters={"rope_type": "dynamic", "factor": 2.0,
                                                                       "rope_theta": 10000.0},
                           rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    out = cli_in_process(capsys, "benchmark", "LLAMA", "frameworks", "--torch-dir", dynamic, "--use-cache",
                         "--static-cache", "--fused-decode", "--cpu", "--working-dir", str(workdir),
                         "--iterations", "1")
    assert _refusal(out) == ("error: --fused-decode: rope type 'dynamic' changes its frequencies with the sequence "
                             "length, which the fused step's precomputed table does not; drop --fused-decode")
    gelu = _edited_copy(base, tmp_path / "gelu", hidden_act="gelu")
    out = cli_in_process(capsys, "benchmark", "LLAMA", "frameworks", "--torch-dir", gelu, "--use-cache",
                         "--static-cache", "--fused-decode", "--cpu", "--working-dir", str(workdir),
                         "--iterations", "1")
    assert _refusal(out) == ("error: --fused-decode: activation 'gelu' is not the SiLU the fused step implements; "
                             "drop --fused-decode")
    gemma = _run(workdir, variant="gemma3-offline", family="LLAMA", fused=False)
    capped = _edited_copy(gemma, tmp_path / "capped", attn_logit_softcapping=50.0)
    out = cli_in_process(capsys, "benchmark", "LLAMA", "frameworks", "--torch-dir", capped, "--use-cache",
                         "--static-cache", "--fused-decode", "--cpu", "--working-dir", str(workdir),
                         "--iterations", "1")
    assert _refusal(out) == ("error: --fused-decode: this config soft-caps its attn_logit_softcapping, which the "
                             "Gemma fused step does not implement; drop --fused-decode")


def test_rope_types_by_layer_type_are_checked():
    """A config whose rope settings go by layer type (Gemma 3) has each checked: a dynamic rope on its full-attention
    layers is refused in the same line as a Llama's."""
    from transformers import Gemma3TextConfig, LlamaConfig

    from LLAMA import attention
    from NNDF.errors import UsageError

    types = ["sliding_attention", "full_attention"]
    gemma = Gemma3TextConfig(num_hidden_layers=2, layer_types=types)
    assert attention.rope_types(gemma) == ["default", "default"]
    attention.check_fixed_rope(gemma)
    gemma.rope_parameters["full_attention"] = {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e6}
    assert attention.rope_types(gemma) == ["dynamic", "default"]
    with pytest.raises(UsageError, match="^--fused-decode: rope type 'dynamic' changes its frequencies"):
        attention.check_fixed_rope(gemma)
    assert attention.rope_types(LlamaConfig()) == ["default"]


def test_every_model_type_has_the_step_but_the_older_gemmas(workdir, capsys):
    """Every model type of the family has a fused step but Gemma's and Gemma 2's, and the graph built from the
    weights but the three Gemmas' (the plain paths run them): --fused-decode is refused for those in one line,
    exit 2."""
    from LLAMA.fused_decode import MODEL_TYPES

    family = registry.family("LLAMA")
    assert set(family.model_types) - {"gemma", "gemma2", "gemma3_text"} == set(MODEL_TYPES)
    assert set(registry.facts(family, "frameworks").fused) == set(MODEL_TYPES) | {"gemma3_text"}
    assert set(registry.facts(family, "onnxrt").fused) == set(MODEL_TYPES)
    if DEVICE == "cuda":
        return
    for backend, variant, model_type in (("frameworks", "gemma2-offline", "gemma2"),
                                         ("onnxrt", "gemma3-offline", "gemma3_text")):
        out = cli_in_process(capsys, "generate", "LLAMA", backend, "--variant", variant, "--use-cache",
                             "--static-cache", "--fused-decode", "--cpu", "--working-dir", str(workdir),
                             "--prompt", "Hi", "--max-new-tokens", "2")
        line = _refusal(out)
        assert line.startswith(f"error: --fused-decode: the {backend} backend has no fused decode step for model "
                               f"type '{model_type}' (fused steps exist for ")
        assert line.endswith("; drop --fused-decode")
