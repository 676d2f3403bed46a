"""A greedy generation on frameworks' static slots lets the step choose and feed its own tokens
(`NNDF.backends.torch.greedy`, `NNDF.generation.GREEDY_IN_STEP`): after the prompt the loop calls
`steps.greedy_forward` once a token and never `steps.forward`, and the tokens are those of the loop choosing them
itself on the same steps (which the parity tests hold to HF generate's): padded rows, EOS mid-way (finished rows
fed the pad token), EOS forbidden for the first tokens (min_new_tokens, min_length), no EOS at all, and a second
generation on the same slot. Decoder-only with the fused step and with HF's model over its static cache, and an
encoder-decoder (T5's step); with HARNESS_TEST_DEVICE=cuda also replayed from CUDA graphs (the step's own and the
logits step's, on one slot). Sampling and other processors keep the loop's own choice."""
import os

import pytest

from NNDF import generation, registry
from NNDF.actions.common import backend_steps, encode, generate_prompt
from NNDF.context import make_context
from NNDF.errors import UsageError
from NNDF.generation import GenerationConfig
from NNDF.options import ModelOptions
from NNDF.sampling import SamplingConfig
from NNDF.steps import position_ids_from_mask

DEVICE = os.environ.get("HARNESS_TEST_DEVICE", "cpu")
PROMPTS = {"decoder": ["The for statement is used to", "A", "Names refer to objects and the"],
           "seq2seq": ["translate English to German: The house is wonderful.", "summarize: A", "Names refer"]}
NEW = 10
CASES = [("GPT2", "gpt2-offline", True), ("GPT2", "gpt2-offline", False), ("T5", "t5-offline", None)]
GRAPHS = [False, True] if DEVICE == "cuda" else [False]  # the step replayed from a CUDA graph, on CUDA


def _counted(steps, monkeypatch):
    """Calls of the steps' one-token `forward` (the prompt's excluded) and of `greedy_forward` (and the cache it
    was last given)."""
    calls = {"forward": 0, "greedy_forward": 0}
    for name in list(calls):
        real = getattr(steps, name)

        def counted(*args, _name=name, _real=real, **kwargs):
            one_token = _name == "greedy_forward" or args[0].shape[1] == 1 and args[1].shape[1] > 1
            calls[_name] += one_token
            if _name == "greedy_forward":
                calls["cache"] = args[0]
            return _real(*args, **kwargs)

        monkeypatch.setattr(steps, name, counted)
    return calls


def _generate(run, steps, prompt, **settings):
    config = GenerationConfig(max_new_tokens=NEW, pad_token_id=run.tokenizer.pad_token_id, **settings)
    result = generate_prompt(steps, prompt, config)
    return [result.new_tokens(r, config.eos_token_id) for r in range(prompt.batch)]


@pytest.mark.parametrize("graph", GRAPHS, ids=["eager", "graph"][:len(GRAPHS)])
@pytest.mark.parametrize("family, variant, fused", CASES, ids=lambda v: str(v))
def test_the_step_chooses_the_loops_tokens(family, variant, fused, graph, workdir, monkeypatch):
    run = make_context(registry.family(family), ModelOptions(
        variant=variant, working_dir=str(workdir), use_cache=True, use_mask=True, static_cache=True,
        fused_decode=fused, device=DEVICE, use_cuda_graph=graph))
    try:
        _check(run, monkeypatch)
    except UsageError as exc:  # HF's model over its static cache, captured, on transformers 5.17 (eager attention)
        assert "cannot be captured with transformers" in str(exc)
        pytest.skip(str(exc))


def _check(run, monkeypatch):
    prompt = encode(run, PROMPTS[run.family.kind])
    eos = run.tokenizer.eos_token_id
    with backend_steps(run, "frameworks") as (_, steps):
        monkeypatch.setattr(generation, "GREEDY_IN_STEP", set())
        plain = _generate(run, steps, prompt, eos_token_id=eos)
        early = plain[0][2]  # a token greedy search emits early, made the EOS: rows stop at different steps
        cases = [dict(eos_token_id=eos), dict(eos_token_id=early), dict(eos_token_id=early, min_new_tokens=4),
                 dict(eos_token_id=(early, plain[1][1]), min_length=prompt.input_ids.shape[1] + 3),
                 dict(eos_token_id=None)]
        expected = [_generate(run, steps, prompt, **case) for case in cases]
        assert any(len(row) < NEW for row in expected[1]) and expected[2] != expected[1]  # the cases differ
        monkeypatch.setattr(generation, "GREEDY_IN_STEP", {DEVICE})
        calls = _counted(steps, monkeypatch)
        for case, want in zip(cases, expected):
            calls.update(forward=0, greedy_forward=0)
            assert _generate(run, steps, prompt, **case) == want, case
            assert calls["forward"] == 0 and 0 < calls["greedy_forward"] < NEW, (case, calls)
        # the last case ran all NEW tokens (NEW - 1 steps): the step advanced its own positions and write position
        slot = getattr(calls["cache"], "kv", calls["cache"])
        last = position_ids_from_mask(prompt.attention_mask)[:, -1] if run.family.kind == "decoder" else 0
        assert (slot.positions[:, 0].cpu() == last + NEW).all()
        if slot.write is not None:
            assert slot.write.item() == prompt.input_ids.shape[1] + NEW - 1
        # sampling keeps the loop's own choice
        calls.update(forward=0, greedy_forward=0)
        _generate(run, steps, prompt, eos_token_id=eos, sampling=SamplingConfig(do_sample=True, top_k=5))
        assert calls["greedy_forward"] == 0 and calls["forward"] > 0
