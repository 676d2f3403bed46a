"""Logits processing and token choice: EOS suppression, repetition penalty, DRY, temperature, top-k, top-p.

Each processor is a pure function over (token history [N, T], scores [N, V]) -> scores [N, V], applied in the
order llama.cpp and HF use: penalties (repetition, then DRY) before temperature, top-k and top-p. All of it
runs on the scores' device; only DRY walks the history on the host (it is off unless asked for).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

NEG_INF = float("-inf")


@dataclass(frozen=True)
class SamplingConfig:
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1.0: off
    repetition_penalty: float = 1.0  # 1.0: off (HF semantics: divide positive logits, multiply negative)
    dry_multiplier: float = 0.0  # 0: DRY off
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = 0  # 0: the whole history
    dry_max_exponent: float = 30.0  # caps base ** (n - allowed) so the penalty stays finite


def suppress_tokens(scores: torch.Tensor, token_id: int | None) -> torch.Tensor:
    """Forbid one token (EOS while fewer than min_new_tokens were generated)."""
    if token_id is None:
        return scores
    scores = scores.clone()
    scores[:, token_id] = NEG_INF
    return scores


def force_token(scores: torch.Tensor, token_id: int) -> torch.Tensor:
    """Only `token_id` is possible (score 0, every other -inf), as HF's ForcedBOSTokenLogitsProcessor does."""
    forced = torch.full_like(scores, NEG_INF)
    forced[:, token_id] = 0.0
    return forced


def repetition_penalty(history: torch.Tensor, scores: torch.Tensor, penalty: float) -> torch.Tensor:
    """CTRL-style penalty on every token already in `history` (prompt included), as HF applies it."""
    if penalty == 1.0:
        return scores
    seen = torch.gather(scores, 1, history)
    seen = torch.where(seen < 0, seen * penalty, seen / penalty)
    return scores.scatter(1, history, seen)


def dry_match_lengths(tokens: list[int], breakers: frozenset[int]) -> dict[int, int]:
    """For each candidate next token, the longest repeat it would extend (DRY's n).

    A candidate t = tokens[j] extends a repeat of length L(j) when the L tokens before position j equal the
    last L tokens of the history. L(j) for all j comes from one Z-algorithm pass over the reversed history
    (O(len)); a repeat may not cross a sequence-breaker token, so L is capped at the distance from the end
    to the last breaker.
    """
    n = len(tokens)
    if n < 2:
        return {}
    cap = next((k for k, tok in enumerate(reversed(tokens)) if tok in breakers), n)
    rev = tokens[::-1]
    z = [0] * n
    left = right = 0
    for i in range(1, n):  # standard Z-algorithm over `rev`
        if i < right:
            z[i] = min(right - i, z[i - left])
        while i + z[i] < n and rev[z[i]] == rev[i + z[i]]:
            z[i] += 1
        if i + z[i] > right:
            left, right = i, i + z[i]
    best: dict[int, int] = {}
    for i in range(1, n):  # the match ending at tokens[n-1-i] is followed by tokens[n-i]
        length = min(z[i], cap)
        if length:
            token = tokens[n - i]
            best[token] = max(best.get(token, 0), length)
    return best


def dry_penalty(
    history: torch.Tensor, scores: torch.Tensor, cfg: SamplingConfig, breakers: frozenset[int]
) -> torch.Tensor:
    """DRY ("Don't Repeat Yourself"): logit[t] -= multiplier * base ** (n - allowed_length) for n >= allowed."""
    if cfg.dry_multiplier == 0.0:
        return scores
    scores = scores.clone()
    window = history if cfg.dry_penalty_last_n <= 0 else history[:, -cfg.dry_penalty_last_n :]
    for row, tokens in enumerate(window.tolist()):
        for token, n in dry_match_lengths(tokens, breakers).items():
            if n >= cfg.dry_allowed_length:
                exponent = min(n - cfg.dry_allowed_length, cfg.dry_max_exponent)
                scores[row, token] -= cfg.dry_multiplier * cfg.dry_base**exponent
    return scores


def top_k_filter(scores: torch.Tensor, k: int) -> torch.Tensor:
    if k <= 0 or k >= scores.shape[-1]:
        return scores
    kth = torch.topk(scores, k, dim=-1).values[:, -1:]
    return scores.masked_fill(scores < kth, NEG_INF)


def top_p_filter(scores: torch.Tensor, p: float) -> torch.Tensor:
    """Keep the smallest set of tokens whose probability reaches `p` (at least one token)."""
    if p >= 1.0:
        return scores
    sorted_scores, order = torch.sort(scores, descending=False)
    cumulative = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
    drop_sorted = cumulative <= (1 - p)
    drop_sorted[:, -1] = False
    drop = drop_sorted.scatter(1, order, drop_sorted)
    return scores.masked_fill(drop, NEG_INF)


def process(history: torch.Tensor, scores: torch.Tensor, cfg: SamplingConfig, breakers=frozenset()) -> torch.Tensor:
    """Penalties, then (when sampling) temperature, top-k and top-p."""
    scores = repetition_penalty(history, scores, cfg.repetition_penalty)
    scores = dry_penalty(history, scores, cfg, breakers)
    if cfg.do_sample:
        if cfg.temperature != 1.0:
            scores = scores / cfg.temperature
        scores = top_k_filter(scores, cfg.top_k)
        scores = top_p_filter(scores, cfg.top_p)
    return scores


def choose(scores: torch.Tensor, cfg: SamplingConfig, generator: torch.Generator | None) -> torch.Tensor:
    """Next token per row [N]: argmax, or a draw from softmax(scores) with the seeded generator."""
    if not cfg.do_sample:
        return scores.argmax(dim=-1)
    probs = scores.softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)
