"""The one generation loop, shared by every backend and family: prefill, decode one token, repeat.

`generate` runs greedy search, sampling, or beam search over a backend's `DecoderSteps`. Batches are left
padded; position ids come from the attention mask, so a padded row produces the same tokens as that row alone.
Greedy and beam search follow HF `generate` semantics token for token (beam search: length penalty, the
`early_stopping=False` heuristic, top 2*beams candidates so finished beams never starve the running ones).
Encoder-decoder models pass their encoder inputs as `encoder`: the prefill then runs `steps.start(encoder)`
(encoder and cross-attention cache, whose result is the initial cache) before the decoder's first step, so
the prefill time includes the encoder.
An optional observer is told when the first token exists, when each token exists, and when generation ends
(the benchmark's timers and its per-token trace).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from NNDF.sampling import SamplingConfig, choose, force_token, process, suppress_tokens
from NNDF.steps import Cache, DecoderSteps, position_ids_from_mask


@dataclass(frozen=True)
class GenerationConfig:
    max_new_tokens: int = 32
    min_new_tokens: int = 0  # EOS is forbidden until this many tokens exist (benchmark: = max_new_tokens)
    num_beams: int = 1
    length_penalty: float = 1.0
    eos_token_id: int | None = None
    pad_token_id: int = 0
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    seed: int = 0
    dry_breakers: frozenset[int] = frozenset()  # token ids that end a DRY repeat
    forced_bos_token_id: int | None = None  # the first new token, whatever the model says (mBART's language)


@dataclass
class GenerationOutput:
    sequences: torch.Tensor  # [B, prompt + new], pad after EOS
    prompt_length: int

    def new_tokens(self, row: int, eos_token_id: int | None) -> list[int]:
        """Generated ids of one row, up to and including its EOS."""
        ids = self.sequences[row, self.prompt_length :].tolist()
        if eos_token_id is not None and eos_token_id in ids:
            ids = ids[: ids.index(eos_token_id) + 1]
        return ids


class Observer:
    """Hooks for timing; the default does nothing."""

    def encoded(self) -> None: ...  # the encoder (and cross-attention cache) of an encoder-decoder model ran

    def first_token(self) -> None: ...

    def token(self, step: int) -> None: ...  # token `step` (0-based) of every row has been chosen

    def finished(self) -> None: ...


class _Decoder:
    """Tracks tokens, mask, positions and cache of a running batch and feeds the backend one step at a time.

    Token ids and mask live in buffers allocated once for prompt + max_new_tokens columns, so a step writes one
    column instead of concatenating; the next position of each row is kept (last position + 1, as HF does)
    instead of being recomputed from the whole mask.
    """

    def __init__(self, steps: DecoderSteps, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new: int,
                 encoder: dict | None = None, observer: Observer | None = None):
        rows, self.length = input_ids.shape
        self.observer = observer or Observer()
        self.steps = steps
        self._ids = input_ids.new_zeros(rows, self.length + max_new)  # [N, T + max_new]
        self._ids[:, : self.length] = input_ids
        self._mask = attention_mask.new_ones(rows, self.length + max_new)
        self._mask[:, : self.length] = attention_mask
        self._next_position = position_ids_from_mask(attention_mask)[:, -1:] + 1  # [N, 1]
        self.encoder = encoder
        self.cache: Cache = None if encoder is not None else steps.new_cache(rows, self.length + max_new)

    @property
    def ids(self) -> torch.Tensor:  # [N, length]
        return self._ids[:, : self.length]

    @property
    def mask(self) -> torch.Tensor:  # [N, length]
        return self._mask[:, : self.length]

    def prefill(self) -> torch.Tensor:
        """Logits of the last prompt position [N, V] (float32)."""
        if self.encoder is not None:
            self.cache = self.steps.start(self.encoder)
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
    steps: DecoderSteps,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    config: GenerationConfig,
    observer: Observer | None = None,
    encoder: dict | None = None,
) -> GenerationOutput:
    """Generate up to `config.max_new_tokens` tokens for each row of a left-padded batch (the decoder's
    prompt; `encoder`: the encoder's named inputs [B, ...] of an encoder-decoder model)."""
    observer = observer or Observer()
    input_ids = input_ids.to(steps.device)
    attention_mask = attention_mask.to(steps.device)
    if encoder is not None:
        encoder = {name: t.to(steps.device) for name, t in encoder.items()}
    run = _beam_search if config.num_beams > 1 else _greedy_or_sample
    return run(steps, input_ids, attention_mask, config, observer, encoder)


def _scores(logits: torch.Tensor, history: torch.Tensor, generated: int, config: GenerationConfig) -> torch.Tensor:
    if generated < config.min_new_tokens:
        logits = suppress_tokens(logits, config.eos_token_id)
    scores = process(history, logits, config.sampling, config.dry_breakers)
    if generated == 0 and config.forced_bos_token_id is not None:
        scores = force_token(scores, config.forced_bos_token_id)
    return scores


def _greedy_or_sample(steps, input_ids, attention_mask, config: GenerationConfig, observer: Observer, encoder):
    decoder = _Decoder(steps, input_ids, attention_mask, config.max_new_tokens, encoder, observer)
    generator = None
    if config.sampling.do_sample:
        generator = torch.Generator(device=steps.device).manual_seed(config.seed)
    finished = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=steps.device)
    prompt_length = input_ids.shape[1]
    logits = decoder.prefill()
    # EOS can only end generation once it is allowed: until then no host sync is needed per token.
    watch_eos = config.eos_token_id is not None
    for step in range(config.max_new_tokens):
        tokens = choose(_scores(logits, decoder.ids, step, config), config.sampling, generator)
        tokens = torch.where(finished, config.pad_token_id, tokens)
        if step == 0:
            observer.first_token()
        observer.token(step)
        last = step == config.max_new_tokens - 1
        if watch_eos and step + 1 >= config.min_new_tokens:
            finished |= tokens == config.eos_token_id
            last = last or bool(finished.all())
        if last:
            decoder.push(tokens)
            break
        logits = decoder.append(tokens)
    observer.finished()
    return GenerationOutput(decoder.ids, prompt_length)


def _beam_search(steps, input_ids, attention_mask, config: GenerationConfig, observer: Observer, encoder):
    """Beam search with HF `generate`'s semantics (early_stopping=False, num_return_sequences=1)."""
    batch, prompt_length = input_ids.shape
    beams = config.num_beams
    device = steps.device
    decoder = _Decoder(steps, input_ids, attention_mask, config.max_new_tokens, encoder, observer)
    logits = decoder.prefill()
    expand = torch.arange(batch, device=device).repeat_interleave(beams)  # prefill once, then copy per beam
    decoder.reorder(expand)
    logits = logits[expand]
    state = _BeamState(batch, beams, prompt_length, config, device)
    for step in range(config.max_new_tokens):
        log_probs = _scores(torch.log_softmax(logits, dim=-1), decoder.ids, step, config)
        parents, tokens = state.advance(log_probs, step, decoder.ids)
        if step == 0:
            observer.first_token()
        observer.token(step)
        if state.done or step == config.max_new_tokens - 1:
            break
        decoder.reorder(parents)
        logits = decoder.append(tokens)
    observer.finished()
    return GenerationOutput(state.best_sequences(config.pad_token_id), prompt_length)


class _BeamState:
    """Running and finished hypotheses of a batch, all as tensors on the device."""

    def __init__(self, batch: int, beams: int, prompt_length: int, config: GenerationConfig, device):
        self.batch, self.beams, self.prompt_length, self.config = batch, beams, prompt_length, config
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
        hits_eos = token == cfg.eos_token_id if cfg.eos_token_id is not None else torch.zeros_like(token, dtype=torch.bool)
        hits_stop = hits_eos | (gen_len >= cfg.max_new_tokens)
        self._collect_finished(top_scores, parent_row, token, hits_stop, history, gen_len)
        live = top_scores + hits_stop.float() * -1e9
        pick = torch.topk(live, beams, dim=1).indices
        self.running_scores = torch.gather(live, 1, pick)
        rows = torch.gather(parent_row, 1, pick).view(-1)
        tokens = torch.gather(token, 1, pick).view(-1)
        self._update_stop_heuristic(gen_len)
        self.done = bool((~self.improvable).all()) or bool(hits_stop.all())
        return rows, tokens

    def _collect_finished(self, scores, parent_row, token, hits_stop, history, gen_len):
        """Among the top `beams` candidates, those that just stopped may enter the finished set."""
        normalized = scores / (gen_len**self.config.length_penalty)
        eligible = hits_stop[:, : self.beams] & self.improvable
        for b, k in eligible.nonzero().tolist():
            score = normalized[b, k]
            worst = int(torch.argmin(self.finished_scores[b]))
            if score > self.finished_scores[b, worst]:
                seq = torch.cat([history[parent_row[b, k]], token[b, k].view(1)])
                self.finished_scores[b, worst] = score
                self.finished_seqs[b][worst] = seq
                self.finished_any[b, worst] = True

    def _update_stop_heuristic(self, length: int) -> None:
        """HF's early_stopping=False rule: stop an item once its best running beam, normalized by the
        current generated length, cannot beat its worst finished hypothesis (all slots filled)."""
        best_running = self.running_scores[:, :1] / (length**self.config.length_penalty)
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
