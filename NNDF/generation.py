"""The one generation loop, shared by every backend and family: prefill, decode one token, repeat.

`generate` runs greedy search, sampling, or beam search over a backend's `GenerativeSteps`. Batches are left
padded; position ids come from the attention mask, so a padded row produces the same tokens as that row alone.
Greedy and beam search follow HF `generate` semantics token for token (beam search: length penalty,
`early_stopping` False / True / "never" as HF 5.23's `_beam_search` decides it, top 2*beams candidates so
finished beams never starve the running ones). Scores go through transformers' own logits processors
(`NNDF.sampling.logits_processors`, over the token history, which is HF's `input_ids`); EOS is detected with
its `EosTokenCriteria`; `eos_token_id` may be one id or several (a chat model's end of text and end of turn):
any of them ends a row, as in HF `generate`. What a run's settings are (a model's generation config under the
user's flags) is decided in `NNDF.decoding`.
Encoder-decoder models pass their encoder inputs as `encoder`: the prefill then runs `steps.start(encoder,
max_length)` (encoder and cross-attention cache, whose result is the initial cache; `max_length`: the decoder
positions the generation may fill, which a static cache allocates) before the decoder's first step, so the
prefill time includes the encoder.
An optional observer is told when the first token exists, when each token exists, and when generation ends
(the benchmark's timers and its per-token trace).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from transformers.generation.stopping_criteria import EosTokenCriteria

from NNDF.errors import UsageError
from NNDF.sampling import SamplingConfig, eos_ids, logits_processors, pick_tokens
from NNDF.steps import Cache, GenerativeSteps, ServedGeneration, position_ids_from_mask


@dataclass(frozen=True)
class GenerationConfig:
    """One generation's settings, with HF `generate`'s meaning for every field of the same name."""

    max_new_tokens: int | None = 32  # None: `max_length` decides
    max_length: int | None = None  # prompt + new tokens (HF's max_length; the decoder's prompt counts)
    min_new_tokens: int = 0  # EOS is forbidden until this many tokens exist (benchmark: = max_new_tokens)
    min_length: int = 0  # EOS is forbidden while prompt + new tokens < min_length (HF's min_length)
    num_beams: int = 1
    length_penalty: float = 1.0
    early_stopping: bool | str = False  # beam search: False (HF's heuristic), True, or "never"
    eos_token_id: int | tuple[int, ...] | None = None  # one id or several: any of them ends a row
    pad_token_id: int = 0
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    seed: int = 0
    dry_breakers: frozenset[int] = frozenset()  # token ids that end a DRY repeat
    forced_bos_token_id: int | None = None  # the first new token after a one-token prompt (mBART's language)
    forced_eos_token_id: int | None = None  # the last token when the length limit is reached (BART, mBART)
    no_repeat_ngram_size: int = 0  # 0: off
    bad_words_ids: tuple[tuple[int, ...], ...] = ()  # token sequences that may never be generated

    def new_tokens(self, prompt_length: int) -> int:
        """Most new tokens after a decoder prompt of this many columns (`max_new_tokens` wins, as in HF)."""
        if self.max_new_tokens is not None:
            return self.max_new_tokens
        if self.max_length is None:
            raise ValueError("GenerationConfig needs max_new_tokens or max_length")
        new = self.max_length - prompt_length
        if new <= 0:
            raise UsageError(f"the prompt has {prompt_length} tokens and the model's generation config caps the "
                             f"whole sequence at max_length {self.max_length}: give --max-new-tokens")
        return new


def cache_bytes(dims, rows: int, beams: int, length: int, itemsize: int) -> int:
    """Bytes of the decoder's KV cache for `rows` x `beams` sequences of `length` positions: a key and a value
    [key/value heads, head_dim] per layer and position (`dims`: an `NNDF.model_config.ModelDims`; `itemsize`: bytes
    per element). A floor: an encoder-decoder's cross-attention cache and the logits come on top."""
    head_dim = dims.head_dim or dims.hidden // dims.heads
    return rows * beams * dims.layers * 2 * (dims.kv_heads or dims.heads) * head_dim * length * itemsize


@dataclass
class GenerationOutput:
    sequences: torch.Tensor  # [B, prompt + new], pad after EOS
    prompt_length: int

    def new_tokens(self, row: int, eos_token_id: int | tuple[int, ...] | None) -> list[int]:
        """Generated ids of one row, up to and including its first EOS (any of several)."""
        ids = self.sequences[row, self.prompt_length :].tolist()
        ends = eos_ids(eos_token_id)
        first = next((i for i, token in enumerate(ids) if token in ends), None)
        return ids if first is None else ids[: first + 1]


class Observer:
    """Hooks for timing; the default does nothing."""

    def encoded(self) -> None: ...  # the encoder (and cross-attention cache) of an encoder-decoder model ran

    def first_token(self) -> None: ...

    def token(self, step: int) -> None: ...  # token `step` (0-based) of every row has been chosen

    def chosen(self, step: int, tokens: torch.Tensor) -> None: ...  # greedy / sampling: token `step` of each row [N]

    def finished(self) -> None: ...


class _RunningBatch:
    """Tracks tokens, mask, positions and cache of a running batch and feeds the backend one step at a time.

    Token ids and mask live in buffers allocated once for prompt + max_new_tokens columns, so a step writes one
    column instead of concatenating; the next position of each row is kept (last position + 1, as HF does)
    instead of being recomputed from the whole mask.
    """

    def __init__(self, steps: GenerativeSteps, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new: int,
                 encoder: dict | None = None, observer: Observer | None = None):
        rows, self.length = input_ids.shape
        self.observer = observer or Observer()
        self.steps = steps
        self._ids = input_ids.new_zeros(rows, self.length + max_new)  # [N, T + max_new]
        self._ids[:, : self.length] = input_ids
        self._mask = attention_mask.new_ones(rows, self.length + max_new)
        self._mask[:, : self.length] = attention_mask
        self._next_position = position_ids_from_mask(attention_mask)[:, -1:] + 1  # [N, 1]
        self.encoder, self.max_length = encoder, self.length + max_new
        self.cache: Cache = None if encoder is not None else steps.new_cache(rows, self.max_length)

    @property
    def ids(self) -> torch.Tensor:  # [N, length]
        return self._ids[:, : self.length]

    @property
    def mask(self) -> torch.Tensor:  # [N, length]
        return self._mask[:, : self.length]

    def prefill(self) -> torch.Tensor:
        """Logits of the last prompt position [N, V] (float32)."""
        if self.encoder is not None:
            self.cache = self.steps.start(self.encoder, self.max_length)
            self.observer.encoded()
        logits, self.cache = self.steps.forward(self.ids, self.mask, position_ids_from_mask(self.mask), self.cache,
                                                last_only=True)
        return logits[:, -1, :].float()

    def push(self, tokens: torch.Tensor) -> None:
        """Record one token per row [N] without running the model (the last step)."""
        self._ids[:, self.length] = tokens
        self.length += 1

    def append(self, tokens: torch.Tensor) -> torch.Tensor:
        """Add one token per row [N] and return the next logits [N, V]."""
        self.push(tokens)
        if self.steps.use_cache:
            logits, self.cache = self.steps.forward(tokens[:, None], self.mask, self._next_position, self.cache,
                                                    last_only=True)
            self._next_position = self._next_position + 1
        else:  # full recompute over the whole sequence (the "cache" holds only an encoder's output, if any)
            logits, self.cache = self.steps.forward(self.ids, self.mask, position_ids_from_mask(self.mask),
                                                    self.cache, last_only=True)
        return logits[:, -1, :].float()

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows `index` [N'] (beam reordering, prompt expansion)."""
        self._ids, self._mask = self._ids[index], self._mask[index]
        self._next_position = self._next_position[index]
        if self.cache is not None:
            self.cache = self.steps.reorder_cache(self.cache, index)


def generate(
    steps: GenerativeSteps,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    config: GenerationConfig,
    observer: Observer | None = None,
    encoder: dict | None = None,
) -> GenerationOutput:
    """Generate up to `config.max_new_tokens` tokens for each row of a left-padded batch (the decoder's
    prompt; `encoder`: the encoder's named inputs [B, ...] of an encoder-decoder model). Steps of a served model
    (`ServedGeneration`) run the whole generation where the model is served."""
    if isinstance(steps, ServedGeneration):
        return steps.generate(input_ids, attention_mask, config, observer, encoder)
    observer = observer or Observer()
    input_ids = input_ids.to(steps.device)
    attention_mask = attention_mask.to(steps.device)
    if encoder is not None:
        encoder = {name: t.to(steps.device) for name, t in encoder.items()}
    search = _beam_search if config.num_beams > 1 else _greedy_or_sample
    return search(steps, input_ids, attention_mask, config, observer, encoder)


def _processors(config: GenerationConfig, attention_mask: torch.Tensor, rows: torch.Tensor | None = None):
    """The logits processors for a prompt's rows (`rows`: the prompt row of each generated row, for beams)."""
    padding = None
    if not bool(attention_mask.all()):  # HF: the repetition penalty skips each row's left padding
        padding = (attention_mask != 0).int().argmax(dim=1)
        padding = padding if rows is None else padding[rows]
    return logits_processors(config, attention_mask.shape[1], padding, attention_mask.device)


def _eos_criteria(config: GenerationConfig) -> EosTokenCriteria | None:
    ids = eos_ids(config.eos_token_id)
    return EosTokenCriteria(list(ids)) if ids else None


def _greedy_or_sample(steps, input_ids, attention_mask, config: GenerationConfig, observer: Observer, encoder):
    prompt_length = input_ids.shape[1]
    max_new = config.new_tokens(prompt_length)
    processors = _processors(config, attention_mask)
    eos_hit = _eos_criteria(config)
    decoder = _RunningBatch(steps, input_ids, attention_mask, max_new, encoder, observer)
    generator = None
    if config.sampling.do_sample:
        generator = torch.Generator(device=steps.device).manual_seed(config.seed)
    finished = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=steps.device)
    logits = decoder.prefill()
    # EOS can only end generation once it is allowed: until then no host sync is needed per token.
    min_new = max(config.min_new_tokens, config.min_length - prompt_length)
    for step in range(max_new):
        tokens = pick_tokens(processors(decoder.ids, logits), config.sampling.do_sample, generator)
        tokens = torch.where(finished, config.pad_token_id, tokens)
        if step == 0:
            observer.first_token()
        observer.token(step)
        observer.chosen(step, tokens)
        last = step == max_new - 1
        if eos_hit is not None and step + 1 >= min_new:
            finished |= eos_hit(tokens[:, None], None)
            last = last or bool(finished.all())
        if last:
            decoder.push(tokens)
            break
        logits = decoder.append(tokens)
    observer.finished()
    return GenerationOutput(decoder.ids, prompt_length)


def _beam_search(steps, input_ids, attention_mask, config: GenerationConfig, observer: Observer, encoder):
    """Beam search with HF `generate`'s semantics (`_beam_search`: early_stopping False / True / "never",
    num_return_sequences=1)."""
    batch, prompt_length = input_ids.shape
    beams = config.num_beams
    device = steps.device
    max_new = config.new_tokens(prompt_length)
    expand = torch.arange(batch, device=device).repeat_interleave(beams)  # prefill once, then copy per beam
    processors = _processors(config, attention_mask, expand)
    decoder = _RunningBatch(steps, input_ids, attention_mask, max_new, encoder, observer)
    logits = decoder.prefill()
    decoder.reorder(expand)
    logits = logits[expand]
    state = _BeamState(batch, beams, max_new, config, device)
    for step in range(max_new):
        log_probs = processors(decoder.ids, torch.log_softmax(logits, dim=-1))
        parents, tokens = state.advance(log_probs, step, decoder.ids)
        if step == 0:
            observer.first_token()
        observer.token(step)
        if state.done or step == max_new - 1:
            break
        decoder.reorder(parents)
        logits = decoder.append(tokens)
    observer.finished()
    return GenerationOutput(state.best_sequences(config.pad_token_id), prompt_length)


class _BeamState:
    """Running and finished hypotheses of a batch, all as tensors on the device."""

    def __init__(self, batch: int, beams: int, max_new: int, config: GenerationConfig, device):
        self.batch, self.beams, self.max_new, self.config = batch, beams, max_new, config
        self.eos_hit = _eos_criteria(config)
        self.stop_when_full = config.early_stopping is True  # HF compares with `is True`
        self.keep = 2 * beams  # candidates per step: enough live ones even if `beams` of them finish
        self.running_scores = torch.zeros(batch, beams, device=device)
        self.running_scores[:, 1:] = -1e9  # only beam 0 is live at first: no duplicate hypotheses
        self.finished_scores = torch.full((batch, beams), -1e9, device=device)
        self.finished_seqs: list[list[torch.Tensor | None]] = [[None] * beams for _ in range(batch)]
        self.finished_any = torch.zeros(batch, beams, dtype=torch.bool, device=device)
        self.improvable = torch.ones(batch, 1, dtype=torch.bool, device=device)
        self.done = False

    def advance(self, log_probs: torch.Tensor, step: int, history: torch.Tensor):
        """Pick the next `beams` running hypotheses per item; returns (parent rows [N], their new tokens [N])."""
        batch, beams, cfg = self.batch, self.beams, self.config
        vocab = log_probs.shape[-1]
        total = (log_probs.view(batch, beams, vocab) + self.running_scores[:, :, None]).view(batch, -1)
        top_scores, top_index = torch.topk(total, self.keep, dim=1)  # [B, keep]
        parent_beam, token = top_index // vocab, top_index % vocab
        parent_row = parent_beam + torch.arange(batch, device=total.device)[:, None] * beams
        gen_len = step + 1
        if self.eos_hit is not None:
            hits_eos = self.eos_hit(token.reshape(-1, 1), None).view_as(token)
        else:
            hits_eos = torch.zeros_like(token, dtype=torch.bool)
        hits_stop = hits_eos | (gen_len >= self.max_new)
        self._collect_finished(top_scores, parent_row, token, hits_stop, history, gen_len)
        live = top_scores + hits_stop.float() * -1e9
        pick = torch.topk(live, beams, dim=1).indices
        self.running_scores = torch.gather(live, 1, pick)
        rows = torch.gather(parent_row, 1, pick).view(-1)
        tokens = torch.gather(token, 1, pick).view(-1)
        self._update_stop_heuristic(gen_len)
        # HF's `_beam_search_has_unfinished_sequences`: no item can improve, or (early_stopping=True) every item
        # has `beams` finished hypotheses, or every candidate hit a stop
        all_full = self.stop_when_full and bool(self.finished_any.all())
        self.done = bool((~self.improvable).all()) or all_full or bool(hits_stop.all())
        return rows, tokens

    def _collect_finished(self, scores, parent_row, token, hits_stop, history, gen_len):
        """Among the top `beams` candidates, those that just stopped may enter the finished set (HF's
        `_update_finished_beams`: not once an item cannot improve, nor, with early_stopping=True, once its
        `beams` slots are full)."""
        normalized = scores / (gen_len**self.config.length_penalty)
        eligible = hits_stop[:, : self.beams] & self.improvable
        if self.stop_when_full:
            eligible = eligible & ~self.finished_any.all(dim=1, keepdim=True)
        for b, k in eligible.nonzero().tolist():
            score = normalized[b, k]
            worst = int(torch.argmin(self.finished_scores[b]))
            if score > self.finished_scores[b, worst]:
                seq = torch.cat([history[parent_row[b, k]], token[b, k].view(1)])
                self.finished_scores[b, worst] = score
                self.finished_seqs[b][worst] = seq
                self.finished_any[b, worst] = True

    def _update_stop_heuristic(self, length: int) -> None:
        """HF's `_check_early_stop_heuristic`: stop an item once its best running beam, normalized by a
        hypothetical length, cannot beat its worst finished hypothesis (all slots filled). The length is the
        current one, except with early_stopping="never" and a positive length penalty: the longest possible."""
        penalty = self.config.length_penalty
        if self.config.early_stopping == "never" and penalty > 0.0:
            length = self.max_new
        best_running = self.running_scores[:, :1] / (length**penalty)
        full = self.finished_any.all(dim=1, keepdim=True)
        worst_finished = torch.where(full, self.finished_scores.min(dim=1, keepdim=True).values, -1e9)
        self.improvable = self.improvable & (best_running > worst_finished)

    def best_sequences(self, pad_token_id: int) -> torch.Tensor:
        """The best finished hypothesis per item, right padded with `pad_token_id` [B, T]."""
        best = []
        for b in range(self.batch):
            order = torch.argsort(self.finished_scores[b], descending=True).tolist()
            best.append(self.finished_seqs[b][order[0]])
        width = max(len(s) for s in best)
        out = torch.full((self.batch, width), pad_token_id, dtype=torch.long, device=best[0].device)
        for b, seq in enumerate(best):
            out[b, : len(seq)] = seq
        return out
