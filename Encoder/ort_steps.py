"""`onnxrt` steps for encoder models: one exported encoder graph on ONNX Runtime behind `NNDF.steps.ForwardSteps`.

The graph runs through `NNDF.backends.onnxrt.steps.OrtGraph`: on the CPU the torch tensors are handed to the session
as numpy views of the same memory and the output is wrapped without a copy; on CUDA every input is bound by
pointer from the torch tensor on the device (IO binding) and the output is written into a torch buffer sized for
this call, on torch's current stream. Only the inputs the graph declares are fed (a DistilBERT graph has no
token_type_ids even when the tokenizer makes them).

With `cuda_graph` (`--use-cuda-graph`, CUDA only), ONNX Runtime's CUDA-graph mode: the session runs on a stream
of its own (capture is impossible on the legacy default stream; torch's stream and that one wait on each other
around every run), and each input shape gets a slot (a `NNDF.slots.Slot` in a `SlotPool`): fixed-address input
buffers, an output buffer, a graph id (`gpu_graph_id`) and the IO binding of those buffers, made once (binding
anew on every call cost ~0.1 ms of host time per forward, measured on an H100). ONNX Runtime captures a slot's
graph during its first run (after the regular run that allocates its memory) and replays it afterwards; inputs are
copied into the slot's buffers on the device.
"""
from __future__ import annotations

from pathlib import Path

import torch

from NNDF.backends.onnxrt.steps import OrtGraph
from NNDF.errors import ArtifactError
from NNDF.slots import Slot, SlotPool


class OrtEncoderSteps:
    name = "onnxrt"

    def __init__(self, path: Path, device: torch.device, output: str, threads: int = 0, cuda_graph: bool = False):
        self.path, self.device, self.output, self.cuda_graph = path, torch.device(device), output, cuda_graph
        self.graph = OrtGraph(path, self.device, threads, cuda_graph)
        missing = [n for n in ("input_ids", "attention_mask") if n not in self.graph.inputs]
        if missing or output not in self.graph.outputs:
            self.graph.close()
            raise ArtifactError(f"{path} is not an encoder graph with a {output} output as this harness exports it "
                                f"(inputs: {', '.join(self.graph.inputs)}; outputs: {', '.join(self.graph.outputs)})")
        self.index = self.graph.output_names.index(output)
        self.slots: SlotPool[Slot] = SlotPool()  # by the inputs' shapes

    def _feeds(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        missing = [name for name in self.graph.inputs if name not in inputs]
        if missing:
            raise ArtifactError(f"{self.path} takes {', '.join(missing)}, which this model's tokenizer does not give")
        return {name: inputs[name] for name in self.graph.inputs}

    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        feeds = self._feeds(inputs)
        if not self.cuda_graph:
            return self.graph.run(feeds)[self.index]
        slot = self._slot(feeds)
        for name, tensor in feeds.items():
            slot.inputs[name].copy_(tensor)  # device to device, on torch's stream
        # replays the slot's graph (captures it the first time)
        self.graph.run_bound(slot.binding, self.graph.run_options(slot.graph_id))
        return slot.output

    def _slot(self, feeds: dict[str, torch.Tensor]) -> Slot:
        key = tuple(tuple(t.shape) for t in feeds.values())
        return self.slots.get(key, lambda number: self._new_slot(feeds, number))

    def _new_slot(self, feeds: dict[str, torch.Tensor], graph_id: int) -> Slot:
        """Fixed-address inputs (int64 [B, T]) shaped as `feeds`, the output ([B, H] / [B, C] / [B, T, C]) and
        their IO binding, made once (the addresses never change)."""
        buffers = {name: torch.empty_like(t) for name, t in feeds.items()}
        output = torch.empty(self.graph.output_shape(self.output, feeds), dtype=self.graph.dtype(self.output),
                             device=self.device)
        slot = Slot(buffers, output, graph_id)
        slot.binding = self.graph.bind(buffers, {self.output: output})
        return slot

    def close(self) -> None:
        self.graph.close()
        self.slots.close()
