"""What the encoder-decoder families' static-cache decode steps share (`--static-cache` on frameworks: T5/,
BART/, BLIP/ `fused_decode.py`): the slot that holds a generation's fixed-address buffers and the contract a
family's step fulfils.

A `Seq2SeqSlot` is a `NNDF.slots.KVSlot` for `rows` x `max_length` decoder positions plus what the encoder gave:
- `past`: the decoder's self-attention keys and values, K0, V0, K1, V1, ... each [rows, heads, max_length,
  head_dim], written in place at the write position (`slot.write`, [1] on the device: every decoder row has the
  same length, decoder prompts are never padded);
- `cross`: every layer's cross-attention keys and values, K0, V0, ... each [rows, heads, encoder_length,
  head_dim], computed once per input from the encoder's output (`FusedSeq2SeqStep.cross`);
- `encoder_mask`: the encoder input's padding mask [rows, encoder_length] (int64, 1 = real), read by every
  cross-attention (and `encoder_last`, its last column's index [1], where our attention kernels read it).
All are allocated once per (rows, max_length, encoder_length), so the one-token step has fixed shapes and
addresses: a CUDA graph captures it and replays it for every later generation of that shape.
"""
from __future__ import annotations

from typing import Protocol

import torch

from CausalLM.fused_step import FusedSettings
from NNDF.slots import KVSlot, stacked_view, stacked_zeros, step_inputs, take_rows

# the encoder-decoder steps' default: on CUDA our Triton GEMV for the products of steps of up to 8 rows (the LM
# head included; from 2 rows through tensor-core dots, `kernels.DOT_ROWS`), cuBLAS for more rows (and inductor's
# reduction form for one row where our kernels do not run, the CPU), and our
# attention kernels for the self- and the cross-attention: one program per row and head, split over column chunks
# above 8 rows and over more than 512 columns (BLIP's image). Measured on an H200
# (docs/PERFORMANCE.md), fp16, batch 1, prompt 128, 64 new tokens, ms a token against inductor's reduction form and
# plain-op attention in the same run: flan-T5-XL 1.866 against 2.060, BART-large 0.613 against 0.674, t5-base 0.552
# against 0.574, t5-small level (0.272, 0.270), BLIP-large 0.594 (split) against 0.643. Each layer's new K and V
# written by one kernel (`paired_kv_write`): BART-large 0.585 against 0.604, t5-small 0.261 against 0.264. T5's
# `wo`, which HF keeps in fp32, read from a half copy (`half_kept_fp32`): flan-T5-XL 1.554 against 1.744, its fp16
# tokens still HF's. Our GEMV's dot form at 4 beams, ms a beam step against cuBLAS in the same run: flan-T5-XL
# 2.307 against 2.688, BART-large 0.944 against 1.082, t5-base 0.764 against 1.008, t5-small 0.466 against 0.569,
# BLIP-large 0.741 against 0.930; at batch 8, ms a step: 2.222 against 2.953, 0.730 against 0.749, 0.592 against
# 0.830, 0.308 against 0.399, 0.558 against 0.751. One attention program per row and head up to 8 rows (no kernel
# combining column chunks after it), ms a step against the split kernel above one row in the same run (2026-11-28):
# batch 8 t5-small 0.262 against 0.278, t5-base 0.536 against 0.551, BART-large 0.618 against 0.625, BLIP-large
# 0.614 against 0.609 (its image columns split either way); 4 beams 0.450 against 0.477, 0.743 against 0.778,
# 0.837 against 0.862, 0.793 against 0.788
SEQ2SEQ_SETTINGS = FusedSettings(reduction_rows=1, gemv_above=0, gemv_rows=8, attention="auto", split_rows=8,
                                 split_columns=512, paired_kv_write=True, half_kept_fp32=True)


def seq2seq_settings(settings: FusedSettings | None = None) -> FusedSettings:
    """`settings`, else the encoder-decoder steps' default, read when a step is made (the device benchmark swaps
    `SEQ2SEQ_SETTINGS` to time other choices: tools/bench/seq2seq_speed.py)."""
    return settings or SEQ2SEQ_SETTINGS


class Seq2SeqSlot(KVSlot):
    """Self-attention buffers (`past`), cross-attention buffers (`cross`), the encoder mask and the one-token
    step's ids, positions and write position, all at fixed addresses."""

    def __init__(self, rows: int, max_length: int, past: list[torch.Tensor], cross: list[torch.Tensor],
                 encoder_mask: torch.Tensor, device, logits: torch.Tensor | None = None, graph_id: int = -1):
        inputs = step_inputs(rows, max_length, device, mask=False)
        inputs["cache_position"] = torch.zeros(1, dtype=torch.long, device=device)
        inputs["encoder_mask"] = encoder_mask
        super().__init__(rows, max_length, past, inputs, logits, graph_id)
        self.cross = cross
        self._cross_stack = stacked_view(cross)  # [layers x 2, rows, ...] over `cross`, or None
        # the cross-attention's last column [1] (our attention kernels read the columns up to a position held on
        # the device: for the encoder's, all of them, those the mask keeps)
        self.encoder_last = torch.full((1,), encoder_mask.shape[1] - 1, dtype=torch.long, device=device)

    encoder_mask = property(lambda self: self.inputs["encoder_mask"])

    def layer_buffers(self, paired: bool) -> tuple[list, list]:
        """Each layer's self-attention buffers as a step's layer function takes them (`write_kv`): (keys, values),
        or with `paired`, where the buffers lie in one allocation, ([2, rows, ...] views of each layer's K and V,
        Nones)."""
        if paired and self._past_stack is not None:
            pairs = list(self._past_stack.unflatten(0, (-1, 2)).unbind(0))
            return pairs, [None] * len(pairs)
        return self.past[0::2], self.past[1::2]

    @property
    def encoder_length(self) -> int:
        return self.encoder_mask.shape[1]

    def take_rows(self, source: "Seq2SeqSlot", index: torch.Tensor, cross: bool = True) -> None:
        """This slot's rows become `source`'s rows `index`: the self-attention buffers and write position always,
        the cross-attention buffers and encoder mask when `cross` (rows move between inputs; beam reordering keeps
        each input's rows on that input, whose cross-attention buffers are identical)."""
        super().take_rows(source, index)
        if cross:
            self.encoder_mask.copy_(source.encoder_mask.index_select(0, index))
            take_rows(self.cross, self._cross_stack, source.cross, source._cross_stack, index)

    def close(self) -> None:
        super().close()
        self.cross, self._cross_stack = [], None


def reordered(cache, index: torch.Tensor, fresh, within_inputs: bool = False):
    """`cache` (a `Seq2Seq.torch_steps.Seq2SeqCache` over a `Seq2SeqSlot`) with rows `index` [N]: in place when the
    row count stays (beam reordering; the cross-attention buffers only when rows change inputs, which
    `within_inputs` rules out without a check), else into `fresh(rows, max_length, encoder_length)`, the pool's
    reset slot for N rows."""
    slot = cache.kv
    if index.numel() == slot.rows:
        slot.take_rows(slot, index, cross=cache.moves_inputs(index, within_inputs))
        return cache.select(index, slot, within_inputs)
    target = fresh(index.numel(), slot.max_length, slot.encoder_length)
    target.take_rows(slot, index)
    return cache.select(index, target)


def write_kv(keys: torch.Tensor, values: torch.Tensor | None, k: torch.Tensor, v: torch.Tensor, write):
    """A layer's new key and value k, v [rows, heads, head_dim] written at column `write` [1] of its buffers
    (`Seq2SeqSlot.layer_buffers`); returns the layer's (keys, values) buffers. `values` None: `keys` holds both,
    [2, rows, heads, length, head_dim], written at once."""
    if values is None:
        keys[:, :, :, write] = torch.stack((k, v))[:, :, :, None, :]
        return keys[0], keys[1]
    keys[:, :, write] = k[:, :, None, :]
    values[:, :, write] = v[:, :, None, :]
    return keys, values


def seq2seq_slot(rows: int, max_length: int, encoder_length: int, layers: int, heads: int, head_dim: int,
                 dtype, device) -> Seq2SeqSlot:
    """A slot of zeroed buffers: `layers` self-attention K/V [rows, heads, max_length, head_dim] and cross-attention
    K/V [rows, heads, encoder_length, head_dim], an all-ones encoder mask."""
    def buffers(length: int) -> list[torch.Tensor]:  # one allocation each: beam reordering moves them at once
        return stacked_zeros(2 * layers, (rows, heads, length, head_dim), dtype, device)

    mask = torch.ones(rows, encoder_length, dtype=torch.long, device=device)
    return Seq2SeqSlot(rows, max_length, buffers(max_length), buffers(encoder_length), mask, device)


class FusedSeq2SeqStep(Protocol):
    """A family's static-cache decoder step over its own buffers (declared in its `frameworks.py`,
    `BackendFacts.fused`: HF model type -> this class, constructed as `Step(model, compile_options)` with the loaded
    HF model and inductor's options, None: eager). The encoder itself runs as HF's module
    (`Seq2Seq.torch_steps`); capture, pooling and beam reordering are the kind's."""

    def new_slot(self, rows: int, max_length: int, encoder_length: int) -> Seq2SeqSlot:
        """Empty buffers for this model (`seq2seq_slot` with its depth, heads, head size, dtype and device)."""

    def cross(self, hidden: torch.Tensor, slot: Seq2SeqSlot) -> None:
        """Fill `slot.cross` from the encoder's output hidden [rows, encoder_length, D] (every layer's cross-attention
        key and value projections; `slot.encoder_mask` is already the input's mask)."""

    def prefill(self, input_ids: torch.Tensor, slot: Seq2SeqSlot, last_only: bool) -> torch.Tensor:
        """The decoder prompt's logits [rows, S, V] ([rows, 1, V] allowed when `last_only`): input_ids [rows, S] at
        decoder positions 0..S-1, their keys/values written to columns 0..S-1 of `slot.past`; eager."""

    def one_token(self, slot: Seq2SeqSlot) -> torch.Tensor:
        """Logits [rows, 1, V] of `slot.ids` [rows, 1] at decoder position `slot.write` (its keys/values written
        there; the columns after it are not read): fixed shapes and addresses, what a CUDA graph captures."""
