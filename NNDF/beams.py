"""Beam search's state on the device: the running and finished hypotheses of a batch as tensors, updated as HF's
`_beam_search` updates them (`BeamState`), the same step's bookkeeping at fixed addresses, captured once as a CUDA
graph and replayed (`BeamGraph`, one per thread and shapes: `beam_graph`), and the search's stop flag, read one
step late so the host never waits for the step it just queued (`LateFlag`). `config` is always an
`NNDF.generation.GenerationConfig`; the loop over the steps that drives all this is `NNDF.generation`'s beam search.
"""
from __future__ import annotations

import threading

import torch

from NNDF.cuda_graphs import restorer, warm_up
from NNDF.sampling import eos_ids, eos_mask, forbid_eos


def _power(n, exponent: float):
    """n ** exponent as HF computes it (a python float) for an int; for a 0-d tensor on the device, in float64 too."""
    return n.double() ** exponent if isinstance(n, torch.Tensor) else n**exponent


class LateFlag:
    """A device-side bool read one step after it is written: its copy to the host is queued behind that step's work
    (CUDA: into pinned memory, with an event), so reading it waits for the step before, not the one just queued."""

    def __init__(self, device: torch.device):
        cuda = device.type == "cuda"
        self._host = torch.zeros(1, dtype=torch.bool, pin_memory=cuda)
        self._event = torch.cuda.Event() if cuda else None
        self._written = False

    def write(self, flag: torch.Tensor) -> None:
        self._host.copy_(flag.view(1), non_blocking=True)
        if self._event is not None:
            self._event.record()
        self._written = True

    def read(self) -> bool:
        """The last value written (False before any)."""
        if not self._written:
            return False
        if self._event is not None:
            self._event.synchronize()
        return bool(self._host.numpy()[0])


def beam_graph(batch: int, beams: int, max_new: int, config, device, width: int, prompt_length: int,
               vocab: int) -> "BeamGraph":
    """This thread's `BeamGraph` for these shapes and settings, reset for a new generation: made (and on CUDA
    captured) once, replayed by every later generation alike (the few most recent kept)."""
    key = (threading.get_ident(), str(device), batch, beams, max_new, width, prompt_length, vocab,
           eos_ids(config.eos_token_id), config.eos_allowed_from(prompt_length), config.length_penalty,
           config.early_stopping, config.pad_token_id)
    graph = _GRAPHS.pop(key, None) or BeamGraph(batch, beams, max_new, config, torch.device(device), width,
                                                prompt_length, vocab)
    _GRAPHS[key] = graph  # the most recent last
    while len(_GRAPHS) > 4:
        _GRAPHS.pop(next(iter(_GRAPHS)))
    graph.reset()
    return graph


_GRAPHS: dict[tuple, "BeamGraph"] = {}


class BeamGraph:
    """One beam step's bookkeeping at fixed addresses: the logits [N, V] and the history [N, W] copied in, then the
    EOS masks (on the device's own step counter, as `NNDF.sampling`'s min-length processors forbid EOS), the
    log-softmax and `BeamState.advance`, whose new state is copied back into the tensors it started from; on CUDA
    captured once (after a warm-up whose changes are undone) and replayed. The state and the counter belong to this
    object and are reset for each generation (`beam_graph`)."""

    def __init__(self, batch: int, beams: int, max_new: int, config, device: torch.device,
                 width: int, prompt_length: int, vocab: int):
        self.state = BeamState(batch, beams, max_new, config, device, width)
        self.initial = [t.clone() for t in self._tensors()]
        self.logits = torch.zeros(batch * beams, vocab, device=device)
        self.history = torch.zeros(batch * beams, width, dtype=torch.long, device=device)
        self.step = torch.zeros((), dtype=torch.long, device=device)  # new tokens so far
        ends = eos_ids(config.eos_token_id)
        self.eos_from = config.eos_allowed_from(prompt_length)
        self.eos = eos_mask(vocab, list(ends), device) if ends and self.eos_from > 0 else None
        self.prompt_length, self.device = prompt_length, device
        self.graph, self.out = None, None

    def _tensors(self) -> list[torch.Tensor]:
        s = self.state
        return [s.running_scores, s.finished_scores, s.finished_seqs, s.finished_len, s.full, s.improvable, s.done]

    def _bind(self, tensors: list[torch.Tensor]) -> None:
        s = self.state
        s.running_scores, s.finished_scores, s.finished_seqs, s.finished_len, s.full, s.improvable, s.done = tensors

    def reset(self) -> None:
        for tensor, initial in zip(self._tensors(), self.initial):
            tensor.copy_(initial)
        self.step.zero_()

    def _choose(self) -> tuple[torch.Tensor, torch.Tensor]:
        log_probs = torch.log_softmax(self.logits, dim=-1)
        if self.eos is not None:
            log_probs = forbid_eos(log_probs, self.eos, self.step < self.eos_from)
        before = self._tensors()
        parents, tokens = self.state.advance(log_probs, self.step, self.history, self.prompt_length + self.step)
        for mine, new in zip(before, self._tensors()):
            mine.copy_(new)
        self._bind(before)
        self.step.add_(1)
        return parents, tokens

    def run(self, logits: torch.Tensor, history: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """This step's (parent rows [N], new tokens [N]) from its logits [N, V] (fp32) and the history [N, W]; on
        CUDA valid until the next call."""
        self.logits.copy_(logits)
        self.history.copy_(history)
        if self.device.type != "cuda":
            return self._choose()
        if self.graph is None:
            warm_up(self._choose, self.device, restorer(self._tensors() + [self.step]), runs=1)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.out = self._choose()
        self.graph.replay()
        return self.out


class BeamState:
    """Running and finished hypotheses of a batch, all as tensors on the device, updated as HF's `_beam_search`
    updates them, without a host sync: the finished set is `beams` slots per item, best first, merged with each
    step's candidates by one top-k (HF's `_update_finished_beams`)."""

    def __init__(self, batch: int, beams: int, max_new: int, config, device, width: int):
        self.batch, self.beams, self.max_new, self.config = batch, beams, max_new, config
        ends = eos_ids(config.eos_token_id)
        self.eos = torch.tensor(ends, device=device) if ends else None
        self.stop_when_full = config.early_stopping is True  # HF compares with `is True`
        self.keep = 2 * beams  # candidates per step: enough live ones even if `beams` of them finish
        self.first_row = torch.arange(batch, device=device)[:, None] * beams  # [B, 1]: each item's first row
        self.running_scores = torch.zeros(batch, beams, device=device)
        self.running_scores[:, 1:] = -1e9  # only beam 0 is live at first: no duplicate hypotheses
        self.finished_scores = torch.full((batch, beams), -1e9, device=device)  # [B, beams], best first
        self.finished_seqs = torch.full((batch, beams, width), config.pad_token_id, device=device)  # prompt + new
        self.finished_len = torch.zeros(batch, beams, dtype=torch.long, device=device)  # new tokens; 0: empty slot
        self.full = torch.zeros(batch, 1, dtype=torch.bool, device=device)  # every slot of the item finished
        self.improvable = torch.ones(batch, 1, dtype=torch.bool, device=device)
        self.done = torch.zeros((), dtype=torch.bool, device=device)

    def advance(self, log_probs: torch.Tensor, step: int, history: torch.Tensor, length: int):
        """Pick the next `beams` running hypotheses per item from log_probs [N, V] (history [N, W]: each row's ids,
        `length` columns so far, pad after); returns (parent rows [N], their new tokens [N])."""
        batch, beams = self.batch, self.beams
        vocab = log_probs.shape[-1]
        total = (log_probs.view(batch, beams, vocab) + self.running_scores[:, :, None]).view(batch, -1)
        top_scores, top_index = torch.topk(total, self.keep, dim=1)  # [B, keep]
        parent_row = top_index // vocab + self.first_row
        token = top_index % vocab
        gen_len = step + 1  # a python int, or a 0-d tensor on the device (`BeamGraph`)
        ends = torch.isin(token, self.eos) if self.eos is not None else torch.zeros_like(token, dtype=torch.bool)
        hits_stop = ends | (gen_len >= self.max_new)
        self._collect_finished(top_scores, parent_row, token, hits_stop, history, length, gen_len)
        live = torch.add(top_scores, hits_stop, alpha=-1e9)  # HF: stopped candidates sink, never drop out
        self.running_scores, pick = torch.topk(live, beams, dim=1)
        rows = torch.gather(parent_row, 1, pick).view(-1)
        tokens = torch.gather(token, 1, pick).view(-1)
        self.full = (self.finished_len > 0).all(dim=1, keepdim=True)
        self._update_stop_heuristic(gen_len)
        # HF's `_beam_search_has_unfinished_sequences`: no item can improve, or (early_stopping=True) every item
        # has `beams` finished hypotheses, or every candidate hit a stop
        done = ~self.improvable.any() | hits_stop.all()
        self.done = done | self.full.all() if self.stop_when_full else done
        return rows, tokens

    def _collect_finished(self, scores, parent_row, token, hits_stop, history, length, gen_len):
        """The top `beams` candidates that just stopped enter the finished set if they beat its worst (HF's
        `_update_finished_beams`: not once an item cannot improve, nor, with early_stopping=True, once its
        `beams` slots are full)."""
        beams, width = self.beams, history.shape[1]
        eligible = hits_stop[:, :beams] & self.improvable  # [B, beams]
        if self.stop_when_full:
            eligible = eligible & ~self.full
        normalized = scores[:, :beams] / _power(gen_len, self.config.length_penalty)
        merged_scores = torch.cat((self.finished_scores, normalized.masked_fill(~eligible, -float("inf"))), dim=1)
        self.finished_scores, kept = torch.topk(merged_scores, beams, dim=1)  # [B, beams] of 2 x beams
        candidates = history.index_select(0, parent_row[:, :beams].reshape(-1)).view(-1, beams, width)
        if isinstance(length, torch.Tensor):  # [B, beams, W]: history + the stopping token, pad after
            candidates.scatter_(2, length.view(1, 1, 1).expand(candidates.shape[0], beams, 1), token[:, :beams, None])
        else:
            candidates[:, :, length] = token[:, :beams]
        merged_seqs = torch.cat((self.finished_seqs, candidates), dim=1)
        self.finished_seqs = torch.gather(merged_seqs, 1, kept[:, :, None].expand(-1, -1, width))
        merged_len = torch.cat((self.finished_len, eligible * gen_len), dim=1)
        self.finished_len = torch.gather(merged_len, 1, kept)

    def _update_stop_heuristic(self, length: int) -> None:
        """HF's `_check_early_stop_heuristic`: stop an item once its best running beam, normalized by a
        hypothetical length, cannot beat its worst finished hypothesis (all slots filled). The length is the
        current one, except with early_stopping="never" and a positive length penalty: the longest possible."""
        penalty = self.config.length_penalty
        if self.config.early_stopping == "never" and penalty > 0.0:
            length = self.max_new
        best_running = self.running_scores[:, :1] / _power(length, penalty)
        worst_finished = torch.where(self.full, self.finished_scores[:, -1:], -1e9)  # slots are sorted, best first
        self.improvable = self.improvable & (best_running > worst_finished)

    def best_sequences(self, prompt_length: int) -> torch.Tensor:
        """The best finished hypothesis per item, right padded with the pad id [B, T] (T: the longest of them)."""
        width = prompt_length + int(self.finished_len[:, 0].max())
        return self.finished_seqs[:, 0, :width].clone()
