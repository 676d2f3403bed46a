"""The one generation loop, shared by every backend and family: prefill, decode one token, repeat.

`generate` runs greedy search, sampling, or beam search over a backend's `GenerativeSteps`. Batches are left
padded; position ids come from the attention mask, so a padded row produces the same tokens as that row alone.
Greedy and beam search follow HF `generate` semantics token for token (beam search: length penalty,
`early_stopping` False / True / "never" as HF 5.23's `_beam_search` decides it, top 2*beams candidates so finished
beams never starve the running ones); its bookkeeping stays on the device and its stop test is read one step late,
so a beam step queues its work without waiting for the device. Scores go through transformers' own logits
processors (`NNDF.sampling.logits_processors`, over the token history, which is HF's `input_ids`); EOS is detected
as HF's `EosTokenCriteria` detects it (`_EndedRows`, in numpy on the CPU); `eos_token_id` may be one id or several
(a chat model's end of text and end of turn): any of them ends a row, as in HF `generate`. What a run's settings are
(a model's generation config under the user's flags) is decided in `NNDF.decoding`.
Encoder-decoder models pass their encoder inputs as `encoder`: the prefill then runs `steps.start(encoder,
max_length)` (encoder and cross-attention cache, whose result is the initial cache; `max_length`: the decoder
positions the generation may fill, which a static cache allocates) before the decoder's first step, so the
prefill time includes the encoder.
An optional observer is told when the first token exists, when each token exists, and when generation ends
(the benchmark's timers and its per-token trace).
A greedy generation whose processors only mask EOS, on steps that can (`greedy_in_step`: frameworks' static
slots) and a device in `GREEDY_IN_STEP`, lets the step choose each next token and feed it to itself
(`steps.greedy_forward`, NNDF/backends/torch/greedy.py): the same tokens, without the loop's own work on the
device between two steps. A beam search whose processors only mask EOS, on a device in `BEAMS_IN_GRAPH`, runs each
step's bookkeeping as one graph (`NNDF.beams.BeamGraph`: on CUDA one replay, not some 40 launches), on any backend;
the beams' state on the device lives in `NNDF.beams`.
"""
from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, field

import numpy as np
import torch

from NNDF.beams import BeamState, LateFlag, beam_graph
from NNDF.errors import UsageError
from NNDF.sampling import EOS_MASKS, SamplingConfig, eos_ids, logits_processors, pick_tokens
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

    def __post_init__(self):
        # lists given for the sequence fields become tuples (and a set frozen): a config is hashable, the key its
        # logits processors are kept under (`_unpadded_processors`)
        if isinstance(self.eos_token_id, list):
            object.__setattr__(self, "eos_token_id", tuple(self.eos_token_id))
        object.__setattr__(self, "bad_words_ids", tuple(tuple(word) for word in self.bad_words_ids))
        object.__setattr__(self, "dry_breakers", frozenset(self.dry_breakers))

    def eos_allowed_from(self, prompt_length: int) -> int:
        """The first new token (0-based) that may be EOS: `min_new_tokens` where set (HF then replaces min_length by
        prompt + min_new_tokens), else what `min_length` leaves after the prompt."""
        if self.min_new_tokens > 0:
            return self.min_new_tokens
        return max(0, self.min_length - prompt_length)

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
                 encoder: dict | None = None, observer: Observer | None = None, fill: int = 0):
        rows, self.length = input_ids.shape
        self.observer = observer or Observer()
        self.steps = steps
        self._ids = input_ids.new_full((rows, self.length + max_new), fill)  # [N, T + max_new]; `fill` after length
        self._ids[:, : self.length] = input_ids
        self._host_ids = self._host_view(self._ids)
        self._mask = attention_mask.new_ones(rows, self.length + max_new)
        self._mask[:, : self.length] = attention_mask
        self._prompt_positions = position_ids_from_mask(attention_mask)  # [N, T], for the prefill
        self._next_position = self._prompt_positions[:, -1:] + 1  # [N, 1]
        self.encoder, self.max_length = encoder, self.length + max_new
        self.cache: Cache = None if encoder is not None else steps.new_cache(rows, self.max_length)
        self._stepping = False  # the step feeds itself (`append_greedy`) since its first call

    @property
    def ids(self) -> torch.Tensor:  # [N, length]
        return self._ids[:, : self.length]

    @property
    def buffer(self) -> torch.Tensor:  # [N, T + max_new]: the ids, then `fill` in the columns not yet written
        return self._ids

    @property
    def mask(self) -> torch.Tensor:  # [N, length]
        return self._mask[:, : self.length]

    def prefill(self) -> torch.Tensor:
        """Logits of the last prompt position [N, V] (float32)."""
        if self.encoder is not None:
            self.cache = self.steps.start(self.encoder, self.max_length)
            self.observer.encoded()
        logits, self.cache = self.steps.forward(self.ids, self.mask, self._prompt_positions, self.cache,
                                                last_only=True)
        return logits[:, -1, :].float()

    @staticmethod
    def _host_view(ids: torch.Tensor):
        """A numpy view of the ids in host memory (None on a device): a token's column is written through it, a
        numpy assignment instead of torch's indexing (on the CPU, the larger part of the loop's own work a token)."""
        return ids.numpy() if ids.device.type == "cpu" else None

    def push(self, tokens: torch.Tensor) -> None:
        """Record one token per row [N] without running the model (the last step)."""
        if self._host_ids is not None:
            self._host_ids[:, self.length] = tokens.numpy()
        else:
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

    def append_greedy(self, tokens: torch.Tensor, feed: bool, eos: tuple[int, ...], forbid: bool,
                      vocab: int) -> torch.Tensor:
        """Add one token per row [N] and return the next ones [N], chosen inside the step
        (`steps.greedy_forward`), which feeds them to itself: `tokens` go to the step only on its first call and
        where the loop changed its choice (`feed`). `eos`, `forbid`: the EOS ids, forbidden for the token chosen
        now; `vocab`: the logits' width. Positions then advance on the device (`reorder` is not for this path)."""
        self.push(tokens)
        first, self._stepping = not self._stepping, True
        chosen, self.cache = self.steps.greedy_forward(self.cache, tokens[:, None] if feed or first else None,
                                                       self._next_position if first else None, self.length, eos,
                                                       forbid, vocab)
        return chosen

    def reorder(self, index: torch.Tensor, within_inputs: bool = False) -> None:
        """Keep rows `index` [N'] (prompt expansion; beam reordering, where every row stays on its own input:
        `within_inputs`, so the mask and positions, equal for an input's beams, stay as they are)."""
        self._ids = self._ids.index_select(0, index)
        self._host_ids = self._host_view(self._ids)
        if not within_inputs:
            self._mask, self._next_position = self._mask[index], self._next_position[index]
        if self.cache is not None:
            self.cache = self.steps.reorder_cache(self.cache, index, within_inputs=within_inputs)


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
    """The logits processors for a prompt's rows (`rows`: the prompt row of each generated row, for beams). Those
    of an unpadded prompt are made once per thread, prompt length, device and settings (`_unpadded_processors`),
    except with bad words: HF's processor for them sizes what it builds by the first vocabulary it sees."""
    padding = None
    if bool(attention_mask.all()):
        if not config.bad_words_ids:
            return _unpadded_processors(threading.get_ident(), config, attention_mask.shape[1], attention_mask.device)
    else:  # HF: the repetition penalty skips each row's left padding
        padding = (attention_mask != 0).int().argmax(dim=1)
        padding = padding if rows is None else padding[rows]
    return logits_processors(config, attention_mask.shape[1], padding, attention_mask.device)


@functools.lru_cache(maxsize=16)
def _unpadded_processors(thread: int, config: GenerationConfig, prompt_length: int, device: torch.device):
    """`logits_processors` for unpadded prompts, kept for the next generation alike: they keep no state from one
    generation to the next, only what they build on first use (the EOS mask of the min-length ones, sized by the
    scores they are given), which is then built once, not at each generation's first token; per thread, so that no
    two threads build it at once."""
    return logits_processors(config, prompt_length, None, device)


class _EndedRows:
    """The rows that have generated one of the EOS ids, as HF's `EosTokenCriteria` detects them (a row's last token
    is one of the ids), and the pad that replaces every later token of theirs. On the CPU the rows are a numpy array
    (a token's handful of torch operations cost 40-90 us there, as much as a small model's step); elsewhere a tensor
    on the device. `count` (rows ended so far) is read on the host at every `update`."""

    def __init__(self, ids: tuple[int, ...], rows: int, device: torch.device):
        self.host = device.type == "cpu"
        if self.host:
            self.eos, self.ended = np.asarray(ids), np.zeros(rows, dtype=bool)
        else:
            self.eos = torch.tensor(ids, device=device)
            self.ended = torch.zeros(rows, dtype=torch.bool, device=device)
        self.count = 0

    def padded(self, tokens: torch.Tensor, pad: int) -> torch.Tensor:
        """`tokens` [N] with `pad` in the rows ended before (the same tensor while none has)."""
        if not self.count:
            return tokens
        if self.host:
            return torch.from_numpy(np.where(self.ended, pad, tokens.numpy()))
        return torch.where(self.ended, pad, tokens)

    def update(self, tokens: torch.Tensor) -> bool:
        """Mark the rows whose token [N] is an EOS id; whether every row has ended."""
        if self.host:
            self.ended |= (tokens.numpy()[:, None] == self.eos).any(axis=1)
        else:
            self.ended |= torch.isin(tokens, self.eos)
        self.count = int(self.ended.sum())
        return self.count == self.ended.shape[0]


# device types where a greedy generation on a static slot lets the step choose and feed its own tokens
# (`steps.greedy_forward`: NNDF.backends.torch.greedy; onnxrt's fused graphs on the CPU, CausalLM.ort_fused): the
# same tokens, and between two steps only the step and one copy on the device. On an H200 (CUDA graphs) it was
# faster in each of 8 same-run pairs, by 0.3-1.3% (GPT-2 0.402 against 0.408 ms a token, flan-T5-XL 1.861 against
# 1.866); on a 2-core CPU llama-offline's step 0.458 -> 0.418 ms fp32, 0.215 -> 0.162 int4 (docs/PERFORMANCE.md)
GREEDY_IN_STEP = {"cpu", "cuda"}


# device types where a beam search whose processors only mask EOS runs each step's bookkeeping (the EOS masks, the
# log-softmax, `BeamState.advance`) as one CUDA graph's replay (`BeamGraph`), not as some 40 launches from the
# host (on the CPU, where the tests run it, it runs as it is, and is not the default). On an H200 at 4 beams, fp16,
# batch 1: t5-small 0.572 ms a step against 1.220, BART-large 1.152 against 1.469 (docs/PERFORMANCE.md): the
# host's 40 launches took about 0.9 ms a step there
BEAMS_IN_GRAPH: set[str] = {"cuda"}


def _greedy_in_step(steps, cache, config: GenerationConfig, processors) -> bool:
    """Whether this generation's tokens are chosen inside the step: greedy, its processors at most the EOS masks
    (`NNDF.sampling`'s min-length ones, which `GreedyChoice` reproduces), steps that can (`greedy_in_step`)."""
    can = getattr(steps, "greedy_in_step", None)
    return (steps.device.type in GREEDY_IN_STEP and not config.sampling.do_sample and can is not None
            and can(cache) and all(isinstance(p, EOS_MASKS) for p in processors))


def _greedy_or_sample(steps, input_ids, attention_mask, config: GenerationConfig, observer: Observer, encoder):
    prompt_length = input_ids.shape[1]
    max_new = config.new_tokens(prompt_length)
    processors = _processors(config, attention_mask)
    ends = eos_ids(config.eos_token_id)
    ended = _EndedRows(ends, input_ids.shape[0], steps.device) if ends else None
    decoder = _RunningBatch(steps, input_ids, attention_mask, max_new, encoder, observer)
    generator = None
    if config.sampling.do_sample:
        generator = torch.Generator(device=steps.device).manual_seed(config.seed)
    logits = decoder.prefill()
    # EOS can only end generation once it is allowed: until then no host sync is needed per token.
    min_new = config.eos_allowed_from(prompt_length)
    in_step = _greedy_in_step(steps, decoder.cache, config, processors)
    vocab, chosen = logits.shape[-1], None
    for step in range(max_new):
        if chosen is None:
            tokens = pick_tokens(processors(decoder.ids, logits), config.sampling.do_sample, generator)
        else:
            tokens = chosen  # the step's own choice, made as the line above makes it
        changed = False  # the loop's tokens differ from the step's own choice
        if ended is not None and ended.count:  # a row has ended (at step min_new - 1 or later): pad from now on
            tokens, changed = ended.padded(tokens, config.pad_token_id), True
        if step == 0:
            observer.first_token()
        observer.token(step)
        observer.chosen(step, tokens)
        last = step == max_new - 1
        if ended is not None and step + 1 >= min_new:
            last = ended.update(tokens) or last
        if last:
            decoder.push(tokens)
            break
        if in_step:
            chosen = decoder.append_greedy(tokens, changed, ends, bool(processors) and step + 1 < min_new, vocab)
        else:
            logits = decoder.append(tokens)
    observer.finished()
    return GenerationOutput(decoder.ids, prompt_length)


def _beam_search(steps, input_ids, attention_mask, config: GenerationConfig, observer: Observer, encoder):
    """Beam search with HF `generate`'s semantics (`_beam_search`: early_stopping False / True / "never",
    num_return_sequences=1). Whether the search is done is read one step late (`LateFlag`), so the host queues
    the next step without waiting for the device; the one step it may run past the end changes nothing kept
    (once done, no hypothesis can enter the finished set) and is not reported to the observer."""
    batch, prompt_length = input_ids.shape
    beams = config.num_beams
    device = steps.device
    max_new = config.new_tokens(prompt_length)
    expand = torch.arange(batch, device=device).repeat_interleave(beams)  # prefill once, then copy per beam
    processors = _processors(config, attention_mask, expand)
    decoder = _RunningBatch(steps, input_ids, attention_mask, max_new, encoder, observer, fill=config.pad_token_id)
    logits = decoder.prefill()
    decoder.reorder(expand)
    logits = logits[expand]
    width = decoder.buffer.shape[1]
    graph = None
    if device.type in BEAMS_IN_GRAPH and all(isinstance(p, EOS_MASKS) for p in processors):
        graph = beam_graph(batch, beams, max_new, config, device, width, prompt_length, logits.shape[-1])
    state = graph.state if graph is not None else BeamState(batch, beams, max_new, config, device, width)
    done = LateFlag(device)
    for step in range(max_new):
        if graph is not None:
            parents, tokens = graph.run(logits, decoder.buffer)
        else:
            log_probs = processors(decoder.ids, torch.log_softmax(logits, dim=-1))
            parents, tokens = state.advance(log_probs, step, decoder.buffer, decoder.length)
        if done.read():  # the previous step ended the search: this one is past HF's end
            break
        done.write(state.done)
        if step == 0:
            observer.first_token()
        observer.token(step)
        if step == max_new - 1:
            break
        decoder.reorder(parents, within_inputs=True)
        logits = decoder.append(tokens)
    observer.finished()
    return GenerationOutput(state.best_sequences(prompt_length), prompt_length)
