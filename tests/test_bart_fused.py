"""BART's and mBART's static-cache decoder step (BART/fused_decode.py) gives HF's logits and tokens in fp32 on the
CPU: bart-offline (post-norm, a decoder deeper than the encoder) and mbart-offline (pre-norm, scale_embedding, the
decoder's final layer norm, a forced first token), with every layer norm, bias and `final_logits_bias` drawn at
random (HF's ones and zeros would hide one applied in the wrong place), an encoder batch whose second row is
right-padded, and stale values in the buffers' unwritten columns. The step runs directly (`cross`, `prefill`, then
`one_token` per position with slot.ids and slot.write set by hand): logits at every position, greedy tokens; the
compiled step gives the same logits (compiled on mbart-offline only, as test_t5_fused.py compiles one variant),
the fp16 step HF's fp16 logits within fp16's rounding. Through the harness (`--static-cache` on frameworks) our
loop gives HF generate's tokens, greedy and beam search, EOS mid-way.
Configs the step does not reproduce are refused in one line.

With HARNESS_TEST_DEVICE=cuda the harness cases also run the step from a CUDA graph, eager and compiled.
"""
import copy

import pytest
import torch

from CausalLM.fused_step import FusedSettings

from NNDF import registry
from NNDF.context import make_context
from NNDF.errors import UsageError
from NNDF.options import ModelOptions

from BART.fused_decode import MODEL_TYPES, FusedBartStep
from NNDF.actions.common import backend_steps, encode

from conftest import counted_kernels
from test_fused_decode import DEVICE, MODES, _mode_id
from test_parity import _hf, _ours

TEXTS = ["The house is wonderful and the garden is green.", "Names refer"]  # row 1 right-padded
DECODED = 8  # decoder positions compared
PREFILLED = 2  # of which the prompt pass computes the first ones
ATOL = 1e-4
PROMPTS = ["The for statement is used to iterate over the elements of a sequence", "A", "Names refer to objects"]


def _perturbed(run, matrices: float | None = None):
    """The run's HF model with every 1-D parameter and final_logits_bias moved by N(0, 0.3), and with `matrices`
    its matrices redrawn with that std (at the offline variants' scale a random post-norm decoder repeats one token
    whatever its input, which generation cases could not tell from a step that ignores its input)."""
    model = run.torch_model().eval()
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for tensor in [*model.parameters(), model.final_logits_bias]:
            if tensor.dim() == 1 or tensor is model.final_logits_bias:
                tensor.add_(torch.randn(tensor.shape, generator=generator) * 0.3)
            elif matrices:
                tensor.copy_(torch.randn(tensor.shape, generator=generator) * matrices)
    return model


@pytest.fixture(scope="module", params=["bart-offline", "mbart-offline"])
def case(request, tmp_path_factory):
    """(run, perturbed model, encoder inputs, encoder output hidden [2, T, E]) for one offline variant."""
    run = make_context(registry.family("BART"), ModelOptions(variant=request.param, device="cpu",
                                                             working_dir=str(tmp_path_factory.mktemp("bart"))))
    model = _perturbed(run)
    inputs = run.tokenizer(TEXTS, return_tensors="pt", padding=True)
    assert inputs["attention_mask"][1, -1] == 0 and inputs["attention_mask"][0].all()  # right-padded
    with torch.no_grad():
        hidden = model.get_encoder()(**inputs).last_hidden_state
    return run, model, inputs, hidden


def _decoder_ids(model) -> torch.Tensor:
    """[2, DECODED] decoder tokens: the start token, then random ones."""
    generator = torch.Generator().manual_seed(7)
    ids = torch.randint(3, model.config.vocab_size, (2, DECODED), generator=generator)
    ids[:, 0] = model.config.decoder_start_token_id
    return ids


def _ready_slot(step, inputs, hidden, max_length: int):
    """A slot with stale noise in every buffer, the encoder mask copied in and the cross K/V computed."""
    slot = step.new_slot(hidden.shape[0], max_length, hidden.shape[1])
    for buffer in slot.past + slot.cross:
        buffer.normal_()
    slot.encoder_mask.copy_(inputs["attention_mask"])
    step.cross(hidden, slot)
    return slot


def _step_logits(step, inputs, hidden, ids) -> torch.Tensor:
    """Our logits [2, DECODED, V]: the prompt pass over the first PREFILLED tokens, then one token at a time."""
    slot = _ready_slot(step, inputs, hidden, max_length=DECODED + 4)
    out = [step.prefill(ids[:, :PREFILLED], slot, last_only=False)]
    for position in range(PREFILLED, DECODED):
        slot.ids.copy_(ids[:, position:position + 1])
        slot.write.fill_(position)
        out.append(step.one_token(slot).clone())
    return torch.cat(out, dim=1)


def _hf_logits(model, inputs, hidden, ids) -> torch.Tensor:
    with torch.no_grad():
        return model(encoder_outputs=(hidden,), attention_mask=inputs["attention_mask"], decoder_input_ids=ids).logits


def test_step_logits_match_hf(case):
    run, model, inputs, hidden = case
    step = FusedBartStep(model, None)
    assert step.pre_norm == (model.config.model_type == "mbart") and len(step.layers) == 3  # decoder depth
    ids = _decoder_ids(model)
    with torch.no_grad():
        ours = _step_logits(step, inputs, hidden, ids)
    torch.testing.assert_close(ours, _hf_logits(model, inputs, hidden, ids), atol=ATOL, rtol=0)
    slot = _ready_slot(step, inputs, hidden, max_length=DECODED)
    with torch.no_grad():
        last = step.prefill(ids, slot, last_only=True)  # [2, 1, V]
    torch.testing.assert_close(last, ours[:, -1:], atol=ATOL, rtol=0)


@pytest.mark.parametrize("case, attention", [("bart-offline", "kernel"), ("mbart-offline", "split")],
                         indirect=["case"])
def test_step_on_our_kernels(case, attention, monkeypatch):
    """The step on our Triton kernels (on the CPU under Triton's interpreter: one attention kernel per variant):
    every product of its two rows through our GEMV (the LM head included), the self- and the cross-attention (over
    the right-padded encoder row) through our attention kernel, one program per head or split over column chunks;
    HF's logits at every position. With HARNESS_TEST_DEVICE=cuda on the GPU (the kernels compiled for it)."""
    run, model, inputs, hidden = case
    if DEVICE == "cuda":
        model, hidden = copy.deepcopy(model).to(DEVICE), hidden.to(DEVICE)
        inputs = {key: value.to(DEVICE) for key, value in inputs.items()}  # the case's stay on the CPU
    calls = counted_kernels(monkeypatch)
    # the split case also writes each layer's new K and V at once (`paired_kv_write`)
    settings = FusedSettings(gemv_above=0, gemv_rows=2, attention=attention, kernels_everywhere=True,
                             paired_kv_write=attention == "split")
    ids = _decoder_ids(model).to(DEVICE)
    with torch.no_grad():
        ours = _step_logits(FusedBartStep(model, None, settings), inputs, hidden, ids)
    torch.testing.assert_close(ours, _hf_logits(model, inputs, hidden, ids), atol=ATOL, rtol=0)
    steps, layers = DECODED - PREFILLED, len(model.get_decoder().layers)
    assert calls["gemv"] == steps * (6 * layers + 1), calls
    assert calls["decode_attention" if attention == "kernel" else "decode_attention_split"] == steps * 2 * layers


def test_greedy_tokens_match_hf_generate(case):
    """Our greedy loop over the step (the forced first token where the variant has one) gives HF generate's tokens,
    up to each row's EOS."""
    run, model, inputs, hidden = case
    step, config = FusedBartStep(model, None), run.source.generation
    new = 10
    with torch.no_grad():
        expected = model.generate(**inputs, generation_config=config, max_new_tokens=new, num_beams=1,
                                  do_sample=False)[:, 1:]
        slot = _ready_slot(step, inputs, hidden, max_length=new + 1)
        token = torch.full((2, 1), config.decoder_start_token_id)
        logits, ours = step.prefill(token, slot, last_only=True), []
        for position in range(1, new + 1):
            token = logits[:, -1].argmax(-1, keepdim=True)
            if position == 1 and config.forced_bos_token_id is not None:
                token.fill_(config.forced_bos_token_id)
            ours.append(token)
            slot.ids.copy_(token)
            slot.write.fill_(position)
            logits = step.one_token(slot)
    ours = torch.cat(ours, dim=1)
    for row in range(2):
        want = expected[row].tolist()
        want = want[:want.index(config.eos_token_id) + 1] if config.eos_token_id in want else want
        assert ours[row, :len(want)].tolist() == want


@pytest.mark.parametrize("case", ["mbart-offline"], indirect=True)
def test_compiled_step_matches_hf(case):
    """torch.compile of the step's three functions on the CPU (2 rows: the products' reduction form), on
    mbart-offline (pre-norm, scale_embedding, the decoder's final layer norm); bart-offline's post-norm is the same
    layer function's other branch, whose eager form test_step_logits_match_hf checks."""
    run, model, inputs, hidden = case
    step = FusedBartStep(model, {}, FusedSettings(reduction_rows=2))  # the reduction form at 2 rows
    assert step.compiled and step.settings.reduces(2, True, step.width)
    ids = _decoder_ids(model)
    with torch.no_grad():
        ours = _step_logits(step, inputs, hidden, ids)
    torch.testing.assert_close(ours, _hf_logits(model, inputs, hidden, ids), atol=ATOL, rtol=0)


def test_fp16_step_logits_close_to_hf(case):
    """The same in fp16 (eager, on the CPU): the weights, the mask and final_logits_bias in the model's dtype."""
    run, model, inputs, hidden = case
    model = copy.deepcopy(model).half()
    ids = _decoder_ids(model)
    with torch.no_grad():
        hidden = model.get_encoder()(**inputs).last_hidden_state
        ours = _step_logits(FusedBartStep(model, None), inputs, hidden, ids)
        expected = _hf_logits(model, inputs, hidden, ids)
    assert ours.dtype == expected.dtype == torch.float16
    bound = float(expected.abs().max()) * 4e-3  # a few fp16 roundings of the largest logit
    torch.testing.assert_close(ours, expected, atol=bound, rtol=0)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Variant -> a saved copy of it with its norms, biases and final_logits_bias perturbed and its matrices
    redrawn at std 0.6 (`_perturbed`)."""
    out = {}
    for variant in ("bart-offline", "mbart-offline"):
        folder = tmp_path_factory.mktemp(variant)
        run = make_context(registry.family("BART"), ModelOptions(variant=variant, device="cpu",
                                                                 working_dir=str(folder / "work")))
        _perturbed(run, matrices=0.6).save_pretrained(folder / "model")
        run.tokenizer.save_pretrained(folder / "model")
        out[variant] = str(folder / "model")
    return out


@pytest.mark.parametrize("mode", MODES, ids=_mode_id)
@pytest.mark.parametrize("variant", ["bart-offline", "mbart-offline"])
def test_static_cache_generate_matches_hf(variant, mode, folders, workdir):
    """Through the harness (`--static-cache` on frameworks: `Seq2Seq.torch_steps.Seq2SeqStaticSteps` over this
    step): HF generate's tokens, greedy and 3 beams, a right-padded encoder batch of three lengths, mBART's forced
    first token, EOS mid-way."""
    run = make_context(registry.family("BART"), ModelOptions(
        variant=variant, torch_dir=folders[variant], working_dir=str(workdir), batch_size=3, use_cache=True,
        use_mask=True, device=DEVICE, static_cache=True, use_cuda_graph=mode[0], torch_compile=mode[1]))
    prompt = encode(run, PROMPTS)
    assert len(set(prompt.encoder["attention_mask"].sum(1).tolist())) == 3  # three lengths, right-padded
    assert (run.source.generation.forced_bos_token_id is not None) == (variant == "mbart-offline")
    model, pad = run.torch_model(), run.tokenizer.pad_token_id
    with backend_steps(run, "frameworks") as (_, steps):
        assert type(steps.fused).__name__ == "FusedBartStep" and steps.fused.compiled == mode[1]
        eos = run.tokenizer.eos_token_id
        expected = {beams: _hf(model, prompt, beams, True, eos, pad) for beams in (1, 3)}
        for beams in (1, 3):
            assert _ours(run, steps, prompt, beams, eos, pad) == expected[beams], f"beams={beams}"
        early = expected[1][0][1]  # a token greedy search emits second in row 0 becomes the EOS
        for beams in (1, 3):  # on the same pooled buffers (and graph) as the cases above
            stopped = _hf(model, prompt, beams, True, early, pad)
            assert beams > 1 or len({len(row) for row in stopped}) > 1  # rows stop at different steps
            assert _ours(run, steps, prompt, beams, early, pad) == stopped, f"EOS case, beams={beams}"


def test_unsupported_activation_is_refused():
    from transformers import BartConfig, BartForConditionalGeneration

    config = BartConfig(vocab_size=32, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
                        max_position_embeddings=16, activation_function="quick_gelu")
    with pytest.raises(UsageError) as refused:
        FusedBartStep(BartForConditionalGeneration(config), None)
    assert str(refused.value) == ("--static-cache: activation 'quick_gelu' is not one the BART step implements "
                                  "(gelu, relu, silu, swish, gelu_new, gelu_pytorch_tanh); drop --static-cache")


def test_every_model_type_of_the_family_has_the_step():
    family = registry.family("BART")
    assert set(family.model_types) == set(MODEL_TYPES) == set(registry.facts(family, "frameworks").fused)
