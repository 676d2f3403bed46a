"""Logits processors: our list equals the one HF `generate` builds (same classes, order, arguments, scores),
DRY against a brute-force definition, seeded token choice."""
import random
from types import SimpleNamespace

import pytest
import torch
from transformers import GenerationConfig as HFGenerationConfig
from transformers.generation.logits_process import MinLengthLogitsProcessor, MinNewTokensLengthLogitsProcessor
from transformers.generation.utils import GenerationMixin

from NNDF.generation import GenerationConfig
from NNDF.sampling import (DryLogitsProcessor, SamplingConfig, dry_match_lengths, logits_processors, pick_tokens)

EOS, VOCAB, PROMPT, NEW = 2, 50, 6, 5


@pytest.fixture
def scores():
    g = torch.Generator().manual_seed(0)
    return torch.randn(3, VOCAB, generator=g) * 3


def _hf_processors(hf: HFGenerationConfig, mask: torch.Tensor | None, encoder_decoder: bool = False):
    """HF 5.23's own list for these settings: `GenerationMixin._get_logits_processor` after `generate`'s
    preparation (global defaults, EOS tensor, lengths from max_new_tokens / min_new_tokens)."""
    model = SimpleNamespace(config=SimpleNamespace(is_encoder_decoder=encoder_decoder))
    model._merge_criteria_processor_list = lambda a, b: GenerationMixin._merge_criteria_processor_list(model, a, b)
    hf.update(**hf._get_default_generation_params(), defaults_only=True)
    hf._eos_token_tensor = torch.tensor([EOS])
    hf.max_length = PROMPT + NEW
    if hf.min_new_tokens is not None:
        hf.min_length = PROMPT + hf.min_new_tokens
    kwargs = {"decoder_attention_mask" if encoder_decoder else "attention_mask": mask}
    return GenerationMixin._get_logits_processor(model, hf, input_ids_seq_length=PROMPT, device="cpu",
                                                 model_kwargs=kwargs)


CASES = {  # (our GenerationConfig fields, the same settings as HF generation-config fields)
    "penalties-lengths-forced": (
        dict(sampling=SamplingConfig(repetition_penalty=1.3), no_repeat_ngram_size=2, bad_words_ids=((7,), (8, 9)),
             min_length=PROMPT + 3, forced_bos_token_id=4, forced_eos_token_id=EOS),
        dict(repetition_penalty=1.3, no_repeat_ngram_size=2, bad_words_ids=[[7], [8, 9]], min_length=PROMPT + 3,
             forced_bos_token_id=4, forced_eos_token_id=EOS)),
    "min-new-tokens": (dict(min_new_tokens=3), dict(min_new_tokens=3)),
    "sampling": (dict(sampling=SamplingConfig(do_sample=True, temperature=0.7, top_k=9, top_p=0.8,
                                              repetition_penalty=0.9)),
                 dict(do_sample=True, temperature=0.7, top_k=9, top_p=0.8, repetition_penalty=0.9)),
    "sampling-defaults": (dict(sampling=SamplingConfig(do_sample=True, top_k=50)), dict(do_sample=True)),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
def test_processors_equal_hf_generate(case, padded, scores):
    ours_cfg, hf_cfg = CASES[case]
    config = GenerationConfig(max_new_tokens=NEW, eos_token_id=EOS, **ours_cfg)
    g = torch.Generator().manual_seed(1)
    mask = torch.ones(3, PROMPT, dtype=torch.long)
    if padded:
        mask[0, :2] = 0
        mask[2, :1] = 0
    padding = (mask != 0).int().argmax(dim=1) if padded else None
    ours = logits_processors(config, PROMPT, padding, "cpu")
    hf = _hf_processors(HFGenerationConfig(**hf_cfg), mask if padded else None)
    if any(isinstance(h, MinNewTokensLengthLogitsProcessor) for h in hf):  # HF's min-length one forbids EOS at the
        hf_kinds = [h for h in hf if not isinstance(h, MinLengthLogitsProcessor)]  # same steps: ours leaves it out
    else:
        hf_kinds = list(hf)
    assert len(ours) == len(hf_kinds) and all(isinstance(o, type(h)) for o, h in zip(ours, hf_kinds))  # or a subclass
    assert len(ours) >= 1
    for extra in range(NEW):  # every step: min-length, forced BOS / EOS depend on the history's length
        history = torch.randint(0, VOCAB, (3, PROMPT + extra), generator=g)
        history[:, PROMPT - 2:PROMPT] = torch.tensor([8, 9])  # gives no-repeat / bad words something to ban
        if extra:
            history[:, PROMPT] = 4
        a, b = ours(history, scores.clone()), hf(history, scores.clone())
        assert torch.equal(a, b), (case, extra)


def test_forced_bos_only_after_one_token_prompt(scores):
    """HF forces the BOS only when the history has one token (an encoder-decoder's start token)."""
    procs = logits_processors(GenerationConfig(forced_bos_token_id=4), 1, None, "cpu")
    out = procs(torch.tensor([[2]] * 3), scores)
    assert (out.argmax(-1) == 4).all() and torch.isinf(out).sum() == 3 * (VOCAB - 1)
    assert torch.equal(procs(torch.tensor([[2, 4]] * 3), scores), scores)


def test_no_processors_when_nothing_is_set(scores):
    assert len(logits_processors(GenerationConfig(eos_token_id=EOS), PROMPT, None, "cpu")) == 0


def _dry_brute(tokens, breakers):
    """Definition: for candidate t, the longest n such that tokens[-n:] + [t] occurred earlier."""
    best = {}
    n_tok = len(tokens)
    for j in range(1, n_tok):  # tokens[j] follows the segment ending at j-1
        n = 0
        while n < j and tokens[j - 1 - n] == tokens[n_tok - 1 - n] and tokens[n_tok - 1 - n] not in breakers:
            n += 1
        if n:
            best[tokens[j]] = max(best.get(tokens[j], 0), n)
    return best


def test_dry_match_lengths_equal_brute_force():
    rng = random.Random(0)
    for _ in range(300):
        tokens = [rng.randrange(4) for _ in range(rng.randrange(2, 40))]
        breakers = frozenset({3}) if rng.random() < 0.5 else frozenset()
        assert dry_match_lengths(tokens, breakers) == _dry_brute(tokens, breakers), tokens


def test_dry_penalises_the_token_that_extends_a_repeat():
    cfg = SamplingConfig(dry_multiplier=0.8, dry_base=1.75, dry_allowed_length=2)
    history = torch.tensor([[5, 6, 7, 8, 1, 5, 6, 7]])  # "5 6 7" repeats; 8 would extend it (n = 3)
    out = DryLogitsProcessor.from_config(cfg)(history, torch.zeros(1, 10))
    assert out[0, 8] == pytest.approx(-0.8 * 1.75 ** (3 - 2))
    assert (out[0, [0, 2, 3, 4, 9]] == 0).all()


def test_dry_runs_after_hf_processors_and_before_warpers():
    cfg = GenerationConfig(sampling=SamplingConfig(do_sample=True, temperature=0.5, repetition_penalty=1.2,
                                                   dry_multiplier=0.8))
    names = [type(p).__name__ for p in logits_processors(cfg, PROMPT, None, "cpu")]
    assert names == ["RepetitionPenaltyLogitsProcessor", "DryLogitsProcessor", "TemperatureLogitsWarper"]


def test_sampling_is_seeded(scores):
    a = pick_tokens(scores, True, torch.Generator().manual_seed(3))
    b = pick_tokens(scores, True, torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
    assert torch.equal(pick_tokens(scores, False, None), scores.argmax(-1))
