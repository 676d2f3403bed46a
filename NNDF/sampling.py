"""Logits processing and token choice, through transformers' own `LogitsProcessor` classes.

`logits_processors` builds the `LogitsProcessorList` that HF `generate` builds for the same settings, in HF
5.23's order (`GenerationMixin._get_logits_processor`): repetition penalty, no-repeat n-grams, bad words,
minimum length (`min_length`, then `min_new_tokens`: HF's classes with the EOS mask made once), forced BOS,
forced EOS; then DRY, where HF puts a caller's
own `logits_processor`; then, only when sampling, temperature, top-k and top-p. Every processor reads the loop's
token history, which is exactly HF's `input_ids` (decoder-only: left padding + prompt + generated;
encoder-decoder: the decoder's start token + generated). All of it runs on the scores' device; only DRY walks
the history on the host (it is off unless asked for).

DRY ("Don't Repeat Yourself", llama.cpp's sampler) has no HF counterpart: `DryLogitsProcessor` is ours, a
`LogitsProcessor` subclass. `pick_tokens` is HF's token choice: argmax, or one draw from softmax(scores) (here
with a seeded generator).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from transformers.generation.logits_process import (ForcedBOSTokenLogitsProcessor, ForcedEOSTokenLogitsProcessor,
                                                    LogitsProcessor, LogitsProcessorList, MinLengthLogitsProcessor,
                                                    MinNewTokensLengthLogitsProcessor, NoBadWordsLogitsProcessor,
                                                    NoRepeatNGramLogitsProcessor, RepetitionPenaltyLogitsProcessor,
                                                    TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper)


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


class DryLogitsProcessor(LogitsProcessor):
    """DRY: logit[t] -= multiplier * base ** min(n - allowed_length, max_exponent) for every candidate t that
    would extend a repeat of length n >= allowed_length (`dry_match_lengths`), per row of the history."""

    def __init__(self, multiplier: float, base: float = 1.75, allowed_length: int = 2, penalty_last_n: int = 0,
                 max_exponent: float = 30.0, breakers: frozenset[int] = frozenset()):
        self.multiplier, self.base, self.allowed_length = multiplier, base, allowed_length
        self.penalty_last_n, self.max_exponent, self.breakers = penalty_last_n, max_exponent, frozenset(breakers)

    @classmethod
    def from_config(cls, cfg: SamplingConfig, breakers: frozenset[int] = frozenset()) -> DryLogitsProcessor:
        return cls(cfg.dry_multiplier, cfg.dry_base, cfg.dry_allowed_length, cfg.dry_penalty_last_n,
                   cfg.dry_max_exponent, breakers)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        if self.multiplier == 0.0:
            return scores
        scores = scores.clone()
        window = input_ids if self.penalty_last_n <= 0 else input_ids[:, -self.penalty_last_n:]
        for row, tokens in enumerate(window.tolist()):
            for token, n in dry_match_lengths(tokens, self.breakers).items():
                if n >= self.allowed_length:
                    exponent = min(n - self.allowed_length, self.max_exponent)
                    scores[row, token] -= self.multiplier * self.base**exponent
        return scores


def eos_mask(vocab: int, eos_ids, device) -> torch.Tensor:
    """A mask [vocab] over the vocabulary, true at the EOS ids (a tensor or a sequence of ints)."""
    return torch.isin(torch.arange(vocab, device=device), torch.as_tensor(eos_ids, device=device))


def forbid_eos(scores: torch.Tensor, eos: torch.Tensor, forbid: torch.Tensor | None = None) -> torch.Tensor:
    """`scores` [N, V] with the EOS ids (`eos_mask` [V]) at -inf, where `forbid` (a bool tensor on the device, for a
    step that decides without the host: a captured graph's) holds, or everywhere when it is None."""
    return scores.masked_fill(eos if forbid is None else eos & forbid, -math.inf)


def _eos_forbidden(processor, scores: torch.Tensor, forbid: bool) -> torch.Tensor:
    """`scores` [N, V] with every EOS id at -inf when `forbid`, else as they are: what HF's min-length processors
    return, from an EOS mask [V] made once (HF rebuilds it and copies the scores at every step)."""
    if not forbid:
        return scores
    mask = getattr(processor, "_eos_mask", None)
    if mask is None or mask.shape[0] != scores.shape[-1]:
        mask = processor._eos_mask = eos_mask(scores.shape[-1], processor.eos_token_id, scores.device)
    return forbid_eos(scores, mask)


class _MinLength(MinLengthLogitsProcessor):
    """HF's `MinLengthLogitsProcessor`: EOS forbidden while the history is shorter than `min_length`."""

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        return _eos_forbidden(self, scores, input_ids.shape[-1] < self.min_length)


class _MinNewTokens(MinNewTokensLengthLogitsProcessor):
    """HF's `MinNewTokensLengthLogitsProcessor`: EOS forbidden until `min_new_tokens` follow the prompt."""

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        return _eos_forbidden(self, scores, input_ids.shape[-1] - self.prompt_length_to_skip < self.min_new_tokens)


# the processors that only mask the EOS ids while they are forbidden (what a step choosing its own greedy token
# reproduces: NNDF.backends.torch.greedy)
EOS_MASKS = (_MinLength, _MinNewTokens)


def _repetition_penalty(penalty: float, padding: torch.Tensor | None) -> RepetitionPenaltyLogitsProcessor:
    """HF's repetition penalty as the installed transformers' `generate` builds it: 5.23 passes each row's left
    padding (pad tokens are not penalised); 5.17 accepts only an int there and its `generate` passes nothing
    (pad tokens are penalised like any other). Parity is with the installed version (both are supported)."""
    if padding is None:
        return RepetitionPenaltyLogitsProcessor(penalty)
    try:
        return RepetitionPenaltyLogitsProcessor(penalty, prompt_ignore_length=padding)
    except ValueError:  # transformers < 5.23: per-row padding is not a thing its generate does
        return RepetitionPenaltyLogitsProcessor(penalty)


class _Processors(LogitsProcessorList):
    """HF's `LogitsProcessorList`, called without its per-call signature inspection (`inspect.signature` of every
    processor on every token, there to route extra keyword arguments none of these processors take): the same
    processors in the same order on the same arguments, ~0.2 ms less host time per token on a 2-core CPU."""

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        for processor in self:
            scores = processor(input_ids, scores)
        return scores


def eos_ids(eos_token_id: int | tuple[int, ...] | list[int] | None) -> tuple[int, ...]:
    """A `GenerationConfig.eos_token_id` (None, one id or several) as a tuple of ids."""
    if eos_token_id is None:
        return ()
    if isinstance(eos_token_id, (list, tuple)):
        return tuple(int(i) for i in eos_token_id)
    return (int(eos_token_id),)


def logits_processors(config, prompt_length: int, padding: torch.Tensor | None, device) -> LogitsProcessorList:
    """The processors of one generation (`config`: an `NNDF.generation.GenerationConfig`), built as HF 5.23's
    `_get_logits_processor` builds them from the equivalent HF GenerationConfig (the same scores at every step;
    HF's min-length processor is left out where its min-new-tokens one forbids EOS at the same steps).

    `prompt_length`: columns of the decoder's prompt (HF's `input_ids_seq_length`, padding included);
    `padding`: left-padding length per row [rows] (HF's `prompt_ignore_length` of the repetition penalty: pad
    tokens are not penalised), None when no row is padded.
    """
    cfg: SamplingConfig = config.sampling
    eos = list(eos_ids(config.eos_token_id)) or None  # HF's processors take one id or a list
    processors = _Processors()
    if cfg.repetition_penalty != 1.0:
        processors.append(_repetition_penalty(cfg.repetition_penalty, padding))
    if config.no_repeat_ngram_size > 0:
        processors.append(NoRepeatNGramLogitsProcessor(config.no_repeat_ngram_size))
    if config.bad_words_ids:
        processors.append(NoBadWordsLogitsProcessor([list(w) for w in config.bad_words_ids], eos))
    # HF: min_new_tokens, when set, replaces min_length by prompt + min_new_tokens (`_prepare_generated_length`) and
    # both processors run; they then forbid EOS at the same steps, so one of them does (one mask over the
    # vocabulary a step, not two)
    if eos is not None and config.min_new_tokens > 0:
        processors.append(_MinNewTokens(prompt_length, config.min_new_tokens, eos, device=device))
    elif eos is not None and config.min_length > 0:
        processors.append(_MinLength(config.min_length, eos, device=device))
    if config.forced_bos_token_id is not None:
        processors.append(ForcedBOSTokenLogitsProcessor(config.forced_bos_token_id))
    if config.forced_eos_token_id is not None:
        max_length = prompt_length + config.new_tokens(prompt_length)
        processors.append(ForcedEOSTokenLogitsProcessor(max_length, config.forced_eos_token_id, device=device))
    if cfg.dry_multiplier > 0:
        processors.append(DryLogitsProcessor.from_config(cfg, config.dry_breakers))
    if cfg.do_sample:
        keep = 2 if config.num_beams > 1 else 1  # HF: one more than the EOS count with beams
        if cfg.temperature != 1.0:
            processors.append(TemperatureLogitsWarper(cfg.temperature))
        if cfg.top_k != 0:
            processors.append(TopKLogitsWarper(top_k=cfg.top_k, min_tokens_to_keep=keep))
        if cfg.top_p < 1.0:
            processors.append(TopPLogitsWarper(top_p=cfg.top_p, min_tokens_to_keep=keep))
    return processors


def pick_tokens(scores: torch.Tensor, do_sample: bool, generator: torch.Generator | None) -> torch.Tensor:
    """Next token per row [N], as HF's `_sample` picks it: argmax, or a draw from softmax(scores) (seeded)."""
    if not do_sample:
        return scores.argmax(dim=-1)
    probs = scores.softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)
