"""`trt` steps for encoder models: one TensorRT engine (one optimization profile) behind `NNDF.steps.ForwardSteps`.

The engine is reached only through `NNDF.backends.trt.steps.EngineIO` (`TensorRTIO` on a GPU; tests stand ONNX
Runtime in for it), so the bookkeeping here runs anywhere. Each call binds the inputs the engine declares (int64
[B, T] torch tensors on the device, by address) and an output buffer sized for this call: the engine's output
shape with its dynamic dimensions read as (batch, sequence) in order, i.e. [B, H], [B, C] or [B, T, C].
A batch outside the engine's profile is a one-line error naming the flags that rebuild it.

With `cuda_graph` (`--use-cuda-graph`), each input shape gets a slot (a `NNDF.slots.Slot` in a `SlotPool`):
fixed-address input and output buffers, bound once; `EngineIO.execute(key)` runs, captures and replays the slot's
graph, and later calls only copy the inputs into the slot's buffers (device to device) and replay. The output is
the slot's buffer, valid until the next call of the same shape.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from NNDF.backends.trt.profiles import Range
from NNDF.backends.trt.steps import EngineIO
from NNDF.errors import ArtifactError, UsageError
from NNDF.slots import Slot, SlotPool


@dataclass(frozen=True)
class EncoderShapes:
    """The engine's one optimization profile: rows and tokens per row (specials included)."""

    batch: Range
    seq: Range


class TrtEncoderSteps:
    name = "trt"

    def __init__(self, io: EngineIO, device, shapes: EncoderShapes, output: str, cuda_graph: bool = False):
        self.io, self.device, self.shapes, self.output = io, torch.device(device), shapes, output
        if output not in io.outputs or not {"input_ids", "attention_mask"} <= set(io.inputs):
            raise ArtifactError(f"the engine is not an encoder engine with a {output} output as this harness builds "
                                f"it (inputs: {', '.join(io.inputs)}; outputs: {', '.join(io.outputs)})")
        self.cuda_graph = cuda_graph
        self.slots: SlotPool[Slot] = SlotPool()  # by (rows, tokens per row)
        self.profile_selected = False

    def _feeds(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        missing = [name for name in self.io.inputs if name not in inputs]
        if missing:
            raise ArtifactError(f"the engine takes {', '.join(missing)}, which this model's tokenizer does not give")
        return {name: inputs[name].to(self.io.dtype(name)).contiguous() for name in self.io.inputs}

    def _check(self, rows: int, length: int) -> None:
        batch, seq = self.shapes.batch, self.shapes.seq
        if not (batch.min <= rows <= batch.max and seq.min <= length <= seq.max):
            raise UsageError(f"a batch of {rows} x {length} tokens is outside the engine's profile (batch "
                             f"{batch.min}..{batch.max}, sequence {seq.min}..{seq.max} tokens); rebuild it with "
                             "--batch-size min opt max and --seq-len min opt max covering it")

    def output_shape(self, rows: int, length: int) -> tuple[int, ...]:
        """The engine's output shape with its dynamic dimensions (-1) taken as batch, then sequence."""
        sizes = iter((rows, length))
        return tuple(next(sizes) if d < 0 else d for d in self.io.shape(self.output))

    def _bind(self, feeds: dict[str, torch.Tensor], output: torch.Tensor) -> None:
        if not self.profile_selected:  # one profile: chosen once per execution context
            self.io.select_profile(0)
            self.profile_selected = True
        for name, tensor in feeds.items():
            self.io.bind(name, tensor, True)
        self.io.bind(self.output, output, False)

    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        feeds = self._feeds(inputs)  # kept alive until the engine has read them (stream order)
        rows, length = feeds["input_ids"].shape
        self._check(rows, length)
        if self.cuda_graph:
            return self._replay(feeds, (rows, length))
        output = torch.empty(self.output_shape(rows, length), dtype=self.io.dtype(self.output), device=self.device)
        self._bind(feeds, output)
        self.io.execute(None)
        return output

    def _replay(self, feeds: dict[str, torch.Tensor], key: tuple[int, int]) -> torch.Tensor:
        slot = self.slots.get(key, lambda _: self._new_slot(feeds, key))
        for name, tensor in feeds.items():
            slot.inputs[name].copy_(tensor)
        if slot.binding is None:  # the addresses the slot's graph is captured with
            self._bind(slot.inputs, slot.output)
            slot.binding = True  # the execution context holds them (TensorRT binds by context, not by object)
        self.io.execute(key)
        return slot.output

    def _new_slot(self, feeds: dict[str, torch.Tensor], key: tuple[int, int]) -> Slot:
        """Fixed-address inputs shaped as `feeds` and the output for `key` = (rows, tokens) (the engine keys its
        captured graph by `key` too, so the slot needs no graph id)."""
        output = torch.empty(self.output_shape(*key), dtype=self.io.dtype(self.output), device=self.device)
        return Slot({name: torch.empty_like(t) for name, t in feeds.items()}, output)

    def close(self) -> None:
        self.io = None
        self.slots.close()
