"""Greedy decoding inside a static slot's one-token step (frameworks): the step chooses the next token itself and
feeds it to itself, so that between two steps the generation loop launches nothing on the device but the step
(a CUDA graph's replay) and one copy of the token into its history.

`greedy_step(slot, one_token)` runs the slot's step, then on the device: the logits' last position as float32,
the EOS ids at -inf where `slot.choice` forbids them (min_length / min_new_tokens: `GreedyChoice`), the argmax
(the token), the token written into the slot's ids, and the slot's write position and positions advanced by one.
These are the loop's own processors (`NNDF.sampling`: a mask over the EOS ids) and token choice
(`pick_tokens`: argmax) in the same order on the same float32 scores, so the tokens are the loop's. The loop
takes this path (`NNDF.generation`, `GREEDY_IN_STEP`) only for greedy generations whose processors are the EOS
masks alone; it feeds a token itself (`input_ids`) where it changed the step's choice (a finished row's pad).

`greedy_forward` is what a steps object's `greedy_forward` calls: the first step of a generation on a slot takes
its ids, positions and length from the host; later ones only the ids the loop changed. With a CUDA graph the
step is captured on its first use per slot (`slot.greedy_graph`, beside the logits step's `slot.graph`).
"""
from __future__ import annotations

from typing import Callable

import torch

from NNDF.backends.torch.capture import capture
from NNDF.sampling import eos_mask, forbid_eos
from NNDF.slots import KVSlot


class GreedyChoice:
    """What a slot's greedy step reads at fixed addresses: a mask over the vocabulary of the EOS ids [V] and
    whether they are forbidden this step [1]. `set` writes them only when they change (a generation's first step,
    and the step where EOS becomes allowed)."""

    def __init__(self, vocab: int, device):
        self.eos = torch.zeros(vocab, dtype=torch.bool, device=device)
        self.forbid = torch.zeros(1, dtype=torch.bool, device=device)
        self._eos_ids: tuple[int, ...] = ()
        self._forbidden = False

    def set(self, eos_ids: tuple[int, ...], forbid: bool) -> None:
        if eos_ids != self._eos_ids:
            self.eos.copy_(eos_mask(self.eos.shape[0], list(eos_ids), self.eos.device))
            self._eos_ids = eos_ids
        if forbid != self._forbidden:
            self.forbid.fill_(forbid)
            self._forbidden = forbid


def greedy_step(slot: KVSlot, one_token: Callable[[KVSlot], torch.Tensor]) -> torch.Tensor:
    """The slot's one-token step, then its greedy token [rows] fed back: written into the slot's ids, the write
    position (where the slot keeps one) and the positions advanced by one."""
    logits = one_token(slot)  # [rows, 1, V]
    choice = slot.choice
    scores = forbid_eos(logits[:, -1, :].float(), choice.eos, choice.forbid)
    tokens = scores.argmax(-1)
    slot.ids.copy_(tokens[:, None])
    slot.positions.add_(1)
    if slot.write is not None:
        slot.write.add_(1)
    return tokens


def greedy_forward(slot: KVSlot, one_token: Callable[[KVSlot], torch.Tensor], input_ids: torch.Tensor | None,
                   position_ids: torch.Tensor | None, length: int, eos_ids: tuple[int, ...], forbid: bool,
                   vocab: int, cuda_graph: bool, device: torch.device, what: str) -> torch.Tensor:
    """The next greedy token [rows] of the generation on `slot`, chosen inside its step (`greedy_step`), valid
    until the next call. `position_ids` [rows, 1] (with `length`, the columns the step sees): the generation's
    first step on this slot, whose inputs come from the host; `input_ids` [rows, 1]: tokens the loop feeds
    instead of the step's own choice (None: the step's); `eos_ids`, `forbid`: the EOS ids and whether they are
    forbidden for the token chosen now; `vocab`: the logits' width."""
    if slot.choice is None:
        slot.choice = GreedyChoice(vocab, device)
    slot.choice.set(eos_ids, forbid)
    if position_ids is not None:
        slot.positions.copy_(position_ids)
        slot.set_length(length)
    if input_ids is not None:
        slot.ids.copy_(input_ids)
    if not cuda_graph:
        return greedy_step(slot, one_token)
    if slot.greedy_graph is None:
        slot.greedy_graph, slot.tokens = capture(slot, lambda s: greedy_step(s, one_token), device, what,
                                                 keep=(slot.ids, slot.positions))
    slot.greedy_graph.replay()
    return slot.tokens
