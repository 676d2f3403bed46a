"""T5's static-cache decoder step (`--static-cache` on frameworks, T5/fused_decode.py) reproduces HF's T5 decoder,
driven directly through the `Seq2Seq.fused_step` contract (HF's encoder, then `cross`, `prefill` over the first
decoder token(s) and `one_token` at each later position): t5-offline (ReLU feed-forward, tied and rescaled head)
and flan-t5-offline (gated-GELU, untied head), their norm gains moved off 1 so a misplaced norm shows; a
right-padded encoder batch. Checked: fp32 logits at every decoder position, greedy tokens, the relative position
bias past `relative_attention_max_distance`, the step compiled by inductor on the CPU, fp16 with HF's fp32 `wo`.
Through the harness (`--static-cache`, the shared loop over `Seq2Seq.torch_steps`): HF generate's tokens for
the same gain-moved models, greedy and 3 beams, a padded encoder batch, EOS mid-way. Feed-forwards the step does
not reproduce are refused in one line.
"""
import copy

import pytest
import torch
from transformers import BatchEncoding

from CausalLM.fused_step import FusedSettings

from NNDF import registry
from NNDF.actions.common import backend_steps, encode
from NNDF.context import make_context
from NNDF.errors import UsageError
from NNDF.options import ModelOptions
from T5.fused_decode import FusedT5Step, embed_step

from conftest import counted_kernels, generate_twice
from test_fused_decode import DEVICE
from test_parity import NEW, _hf

TEXTS = ["translate English to German: The house is wonderful.", "summarize: A"]
POSITIONS = 8  # decoder positions compared
MAX_LENGTH = 12  # the slot's decoder columns (more than are written: unwritten columns must stay unread)


def _model(variant, workdir):
    """The offline variant's HF model in fp32 on the CPU, every norm gain moved by N(0, 0.3) (HF's ones would hide
    a norm applied in the wrong place), and its tokenizer."""
    run = make_context(registry.family("T5"), ModelOptions(variant=variant, working_dir=str(workdir), device="cpu",
                                                           use_cache=True, use_mask=True))
    model = copy.deepcopy(run.torch_model()).float().eval()
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 1:
                param.add_(torch.randn(param.shape, generator=generator) * 0.3)
    return model, run.tokenizer


def _reference(model, batch):
    """HF greedy's decoder sequence [R, POSITIONS] (decoder start token first) and HF's logits along it."""
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=POSITIONS - 1, min_new_tokens=POSITIONS - 1, do_sample=False)
        ids = out[:, :POSITIONS]
        return ids, model(**batch, decoder_input_ids=ids).logits  # [R, POSITIONS, V]


@pytest.fixture(scope="module")
def cases(workdir):
    """Each variant's case, made on first use (`_case`)."""
    return {"workdir": workdir}


def _case(cases, variant):
    """(model, tokenizer, encoder batch, HF's greedy decoder ids, HF's logits along them) for `variant`."""
    if variant not in cases:
        model, tok = _model(variant, cases["workdir"])
        batch = tok(TEXTS, return_tensors="pt", padding=True)
        assert 0 in batch.attention_mask[1].tolist()  # row 1 right-padded
        cases[variant] = (model, tok, batch, *_reference(model, batch))
    return cases[variant]


@pytest.fixture(params=["t5-offline", "flan-t5-offline"])
def case(request, cases):
    return _case(cases, request.param)


def _start(step, model, batch):
    """A slot for the batch with the cross-attention buffers filled from HF's encoder output."""
    slot = step.new_slot(batch.input_ids.shape[0], MAX_LENGTH, batch.input_ids.shape[1])
    hidden = model.encoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
    slot.encoder_mask.copy_(batch.attention_mask)
    step.cross(hidden, slot)
    return slot


def _step_logits(step, model, batch, ids, prompt=1):
    """Our step's logits [R, POSITIONS, V] along `ids`: `prefill` over the first `prompt` tokens, then `one_token`
    at each later position."""
    with torch.no_grad():
        slot = _start(step, model, batch)
        out = [step.prefill(ids[:, :prompt], slot, last_only=False)]
        for position in range(prompt, ids.shape[1]):
            slot.ids.copy_(ids[:, position:position + 1])
            slot.write.fill_(position)
            out.append(step.one_token(slot).clone())
    return torch.cat(out, dim=1)


@pytest.mark.parametrize("prompt", [1, 3])
def test_logits_match_hf_at_every_position(case, prompt):
    model, _, batch, ids, expected = case
    got = _step_logits(FusedT5Step(model, None), model, batch, ids, prompt)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_greedy_tokens_match_hf_generate(case):
    """Our step's own greedy loop (each argmax fed back) gives HF generate's tokens."""
    model, _, batch, ids, _ = case
    step = FusedT5Step(model, None)
    with torch.no_grad():
        slot = _start(step, model, batch)
        tokens = [ids[:, :1], step.prefill(ids[:, :1], slot, last_only=True).argmax(-1)]
        for position in range(1, POSITIONS - 1):
            slot.ids.copy_(tokens[-1])
            slot.write.fill_(position)
            tokens.append(step.one_token(slot).argmax(-1))
    assert torch.cat(tokens, dim=1).tolist() == ids.tolist()


@pytest.mark.parametrize("variant, attention", [("t5-offline", "kernel"), ("flan-t5-offline", "split")])
def test_step_on_our_kernels(variant, attention, cases, monkeypatch):
    """The step on our Triton kernels (on the CPU under Triton's interpreter: one attention kernel per variant):
    every product of its two rows through our GEMV (wo in the model's dtype, the LM head included), the
    self-attention with T5's relative position bias and the cross-attention over the right-padded encoder row
    through our attention kernel, one program per head or split over column chunks; HF's logits at every
    position. With HARNESS_TEST_DEVICE=cuda on the GPU (the kernels compiled for it)."""
    model, _, batch, ids, expected = _case(cases, variant)
    if DEVICE == "cuda":
        model, ids = copy.deepcopy(model).to(DEVICE), ids.to(DEVICE)
        batch = BatchEncoding({key: value.to(DEVICE) for key, value in batch.items()})  # the case's stays on the CPU
    calls = counted_kernels(monkeypatch)
    # the split case also writes each layer's new K and V at once (`paired_kv_write`)
    settings = FusedSettings(gemv_above=0, gemv_rows=2, attention=attention, kernels_everywhere=True,
                             paired_kv_write=attention == "split")
    ours = _step_logits(FusedT5Step(model, None, settings), model, batch, ids)
    # on an H200 the split kernel's sums (in chunks, then combined) were 1.2e-4 off at 2 of flan-t5-offline's logits
    tolerance = 1e-4 if DEVICE == "cpu" else 2e-4
    torch.testing.assert_close(ours.cpu(), expected, atol=tolerance, rtol=1e-4)
    steps, layers = POSITIONS - 1, len(model.decoder.block)
    assert calls["gemv"] == steps * (6 * layers + 1), calls
    assert calls["decode_attention" if attention == "kernel" else "decode_attention_split"] == steps * 2 * layers


def test_position_bias_past_max_distance(case):
    """The step's self-attention bias at late write positions (distances past relative_attention_max_distance
    share the last bucket) is HF's compute_bias for that query; the columns after it are not read."""
    model = case[0]
    step, attention = FusedT5Step(model, None), model.decoder.block[0].layer[0].SelfAttention
    length = 2 * model.config.relative_attention_max_distance + 8
    for write in (0, 5, model.config.relative_attention_max_distance + 1, length - 1):
        _, _, valid, bias, _ = embed_step(torch.zeros(1, 1, dtype=torch.long), torch.ones(1, 3, dtype=torch.long),
                                          torch.tensor([write]), step.embed, step.bias_table, step.final_norm,
                                          step.eps, length, torch.float32)
        with torch.no_grad():
            expected = attention.compute_bias(1, write + 1, past_seen_tokens=write)[0, :, 0]  # [H, write + 1]
        torch.testing.assert_close(bias[0, :, :write + 1], expected, atol=0, rtol=0)
        assert valid[0].tolist() == [column <= write for column in range(length)]


@pytest.mark.parametrize("paired", [False, True], ids=["kv-apart", "kv-paired"])
def test_compiled_step_matches_hf(cases, paired):
    """The step's three functions compiled by inductor (`compile_options={}`) on the CPU, each once (the layer
    function serves every layer), give HF's logits (two rows: the reduction form of the products), with each
    layer's new K and V written apart or at once (`paired_kv_write`). On flan-t5-offline (the gated feed-forward;
    the ReLU one is the same layer function's other branch)."""
    from torch._dynamo.utils import counters

    model, _, batch, ids, expected = _case(cases, "flan-t5-offline")
    torch._dynamo.reset()  # each case compiles its three functions afresh
    step = FusedT5Step(model, {}, FusedSettings(reduction_rows=2, paired_kv_write=paired))  # reduction form, 2 rows
    assert step.settings.reduces(ids.shape[0], step.compiled, step.width)
    graphs = counters["stats"]["unique_graphs"]
    torch.testing.assert_close(_step_logits(step, model, batch, ids), expected, atol=1e-4, rtol=1e-4)
    assert counters["stats"]["unique_graphs"] - graphs == 3


def test_fp16_with_fp32_wo(case, tmp_path):
    """Loaded in fp16, HF keeps `wo` in fp32 (its residual stream turns fp32 after the first layer): the step runs
    that model and stays closer to HF's fp16 logits than HF's fp16 is to its fp32."""
    from transformers import T5ForConditionalGeneration

    model, _, batch, ids, expected = case
    model.save_pretrained(tmp_path)
    half = T5ForConditionalGeneration.from_pretrained(tmp_path, dtype=torch.float16).eval()
    assert half.decoder.block[0].layer[2].DenseReluDense.wo.weight.dtype == torch.float32
    step = FusedT5Step(half, None)
    assert step.dtype == torch.float16 and step.stream == torch.float32
    with torch.no_grad():
        hf = half(**batch, decoder_input_ids=ids).logits.float()
    got = _step_logits(step, half, batch, ids).float()
    assert (got - hf).abs().max() < 0.2 * (hf - expected).abs().max()


def test_half_copy_of_fp32_wo(cases, tmp_path, monkeypatch):
    """`FusedSettings.half_kept_fp32`: in an fp16 model whose wo HF keeps in fp32, the one-token step's wo products
    read a half copy of it where our GEMV runs them (under Triton's interpreter here), still fed and returned in
    fp32; where wo's product is F.linear (more rows than the GEMV takes) HF's fp32 weight stays. The logits stay
    much closer to the fp32-wo step's than HF's fp16 is to its fp32 (only wo's rounding differs)."""
    import T5.fused_decode as t5
    from CausalLM.fused_step import GEMV
    from transformers import T5ForConditionalGeneration

    model, _, batch, ids, expected = _case(cases, "flan-t5-offline")
    model.save_pretrained(tmp_path)
    half = T5ForConditionalGeneration.from_pretrained(tmp_path, dtype=torch.float16).eval().to(DEVICE)
    batch = BatchEncoding({key: value.to(DEVICE) for key, value in batch.items()})  # the case's stays on the CPU
    ids, expected = ids.to(DEVICE), expected.to(DEVICE)
    with torch.no_grad():
        hf = half(**batch, decoder_input_ids=ids).logits.float()
    kernels = dict(gemv_above=0, gemv_rows=2, kernels_everywhere=True)
    plain = _step_logits(FusedT5Step(half, None, FusedSettings(**kernels)), half, batch, ids).float()
    step = FusedT5Step(half, None, FusedSettings(**kernels, half_kept_fp32=True))
    copies = {w[-1].data_ptr() for w in step.half_wo_layers}  # updated for each step below
    assert {w[-1].dtype for w in step.half_wo_layers} == {torch.float16} and step.stream == torch.float32
    seen, real = [], t5.product
    monkeypatch.setattr(t5, "product", lambda x, w, b, form, dtype=None, **kw: seen.append(
        (w.data_ptr() in copies, w.dtype, dtype or x.dtype, form)) or real(x, w, b, form, dtype=dtype, **kw))
    got = _step_logits(step, half, batch, ids).float()
    read = [entry for entry in seen if entry[0]]
    assert len(read) == (POSITIONS - 1) * len(step.layers)  # every one-token wo product, none elsewhere
    assert {entry[1:] for entry in read} == {(torch.float16, torch.float32, GEMV)}
    assert 0 < (got - plain).abs().max() < 0.2 * (hf - expected).abs().max()
    narrow = FusedT5Step(half, None, FusedSettings(**dict(kernels, gemv_rows=1), half_kept_fp32=True))
    copies.clear()
    copies.update(w[-1].data_ptr() for w in narrow.half_wo_layers)
    seen.clear()
    _step_logits(narrow, half, batch, ids)  # 2 rows: wo through F.linear, HF's fp32 weight
    assert seen and not any(entry[0] for entry in seen)


@pytest.mark.parametrize("variant", ["t5-offline", "flan-t5-offline"])
def test_harness_static_cache_gives_hf_tokens(variant, cases, tmp_path):
    """`--static-cache` on frameworks runs this step through the shared loop (the model folder given by
    --torch-dir): HF generate's tokens, greedy and 3 beams, on a padded encoder batch, and 3 beams with a token
    greedy emits early as EOS (rows stop at different steps)."""
    model, tok = _case(cases, variant)[:2]
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    run = make_context(registry.family("T5"), ModelOptions(
        variant=variant, torch_dir=str(tmp_path), working_dir=str(cases["workdir"]), batch_size=3, use_cache=True,
        static_cache=True, use_mask=True, device="cpu"))
    prompt = encode(run, TEXTS + ["Names refer to objects"])
    assert not prompt.encoder["attention_mask"].all()
    eos, pad = tok.eos_token_id, tok.pad_token_id
    with backend_steps(run, registry.backend(run.family, "frameworks")) as (_, steps):
        assert type(steps.fused) is FusedT5Step
        early = _hf(model, prompt, 1, True, None, pad)[0][2]
        for beams, stop in ((1, eos), (3, eos), (3, early)):
            ours = generate_twice(run, steps, prompt, NEW, beams, stop)
            assert ours == _hf(model, prompt, beams, True, stop, pad), f"beams={beams}, eos={stop}"


@pytest.mark.parametrize("feed_forward", ["gated-silu", "gelu"])
def test_unsupported_feed_forward_is_refused(feed_forward):
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(vocab_size=32, d_model=8, d_kv=4, d_ff=16, num_layers=1, num_heads=2,
                      feed_forward_proj=feed_forward)
    with pytest.raises(UsageError) as refused:
        FusedT5Step(T5ForConditionalGeneration(config), None)
    assert str(refused.value) == (f"--static-cache: T5 feed-forward {feed_forward!r} is not one the static-cache "
                                  "step implements (relu, gated-gelu); drop --static-cache")


def test_the_family_declares_the_step():
    from T5.fused_decode import MODEL_TYPES

    family = registry.family("T5")
    assert set(family.model_types) == set(MODEL_TYPES) == set(registry.facts(family, "frameworks").fused)
