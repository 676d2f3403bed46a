"""Logits processors against HF's own implementations, and DRY against a brute-force definition."""
import random

import pytest
import torch
from transformers.generation.logits_process import (RepetitionPenaltyLogitsProcessor, TopKLogitsWarper,
                                                    TopPLogitsWarper)

from NNDF.sampling import (SamplingConfig, choose, dry_match_lengths, dry_penalty, repetition_penalty,
                           top_k_filter, top_p_filter)


@pytest.fixture
def scores():
    g = torch.Generator().manual_seed(0)
    return torch.randn(3, 50, generator=g) * 3


def test_top_k_matches_hf(scores):
    assert torch.equal(top_k_filter(scores, 7), TopKLogitsWarper(7)(None, scores))


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_top_p_matches_hf(scores, p):
    assert torch.equal(top_p_filter(scores, p), TopPLogitsWarper(p)(None, scores))


def test_repetition_penalty_matches_hf(scores):
    history = torch.randint(0, 50, (3, 12), generator=torch.Generator().manual_seed(1))
    ours = repetition_penalty(history, scores, 1.3)
    assert torch.allclose(ours, RepetitionPenaltyLogitsProcessor(1.3)(history, scores))
    assert not torch.equal(ours, scores)


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
    out = dry_penalty(history, torch.zeros(1, 10), cfg, frozenset())
    assert out[0, 8] == pytest.approx(-0.8 * 1.75 ** (3 - 2))
    assert (out[0, [0, 2, 3, 4, 9]] == 0).all()


def test_sampling_is_seeded(scores):
    cfg = SamplingConfig(do_sample=True)
    a = choose(scores, cfg, torch.Generator().manual_seed(3))
    b = choose(scores, cfg, torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
