"""The decoder-only kind on ONNX Runtime: `OrtSteps`, the step contract over one decoder graph (`OrtGraph`, the
`onnxrt` backend's session with IO binding). Its cache is a tuple of torch tensors (present.* of the previous step
become past.* of the next), or for a static-cache graph (one with a `cache_position` input) a
`NNDF.slots.KVSlot`: full-length buffers bound as both past and present, so the graph writes the new keys and
values in place and every one-token step has the same shapes and addresses. With `cuda_graph`, ONNX Runtime
captures that step once per slot (its CUDA-graph mode, `gpu_graph_id` = the slot's id) and replays it; the
prompt pass runs uncaptured (`gpu_graph_id` -1).
"""
from __future__ import annotations

from pathlib import Path

import torch

from NNDF.backends.onnxrt.steps import OrtGraph, empty_past
from NNDF.errors import ArtifactError
from NNDF.slots import KVSlot, SlotPool, reordered, step_inputs


class OrtSteps:
    name = "onnxrt"

    def __init__(self, path: Path, device: torch.device, use_cache: bool, threads: int = 0,
                 cuda_graph: bool = False):
        self.device, self.use_cache = device, use_cache
        self.graph = OrtGraph(path, device, threads, cuda_graph)
        self.inputs, self.output_names = self.graph.inputs, self.graph.output_names
        self._check_signature(path)
        self.past_names = [n for n in self.inputs if n.startswith("past.")]
        self.present_names = [n for n in self.output_names if n.startswith("present.")]
        self.takes_positions = "position_ids" in self.inputs
        self.static = "cache_position" in self.inputs
        if cuda_graph and not self.static:
            raise ArtifactError(f"{path} has a growing KV cache: CUDA graphs need the static-cache graph "
                                "(export with --static-cache)")
        self.cuda_graph = cuda_graph
        self._slots: SlotPool[KVSlot] = SlotPool()

    def _check_signature(self, path: Path) -> None:
        has_past = any(n.startswith("past.") for n in self.inputs)
        missing = {"input_ids", "attention_mask"} - set(self.inputs)
        if missing or self.output_names[0] != "logits" or has_past != self.use_cache:
            want = "with" if self.use_cache else "without"
            raise ArtifactError(
                f"{path} is not a decoder graph {want} KV cache as this harness exports it "
                f"(inputs: {', '.join(self.inputs)}; outputs: {', '.join(self.output_names[:3])}...)")

    def new_cache(self, batch: int, max_length: int):
        if not self.use_cache:
            return None
        if self.static:
            return self._slot(batch, max_length).reset()
        return tuple(empty_past(self.inputs[name], batch, self.graph.dtype(name), self.device)
                     for name in self.past_names)

    def _slot(self, rows: int, max_length: int) -> KVSlot:
        return self._slots.get((rows, max_length), lambda number: self._new_slot(rows, max_length, number))

    def _new_slot(self, rows: int, max_length: int, graph_id: int) -> KVSlot:
        """The past buffers (bound as present too), the full-width mask, the one-token step's ids, positions,
        write position (a device scalar) and logits [rows, 1, vocab] at fixed addresses; CUDA graph `graph_id`."""
        past = [empty_past(self.inputs[name], rows, self.graph.dtype(name), self.device, max_length)
                for name in self.past_names]
        inputs = step_inputs(rows, max_length, self.device)
        inputs["cache_position"] = torch.zeros((), dtype=torch.long, device=self.device)
        vocab = self.graph.outputs["logits"].shape[-1]
        logits = torch.empty(rows, 1, vocab, dtype=self.graph.dtype("logits"), device=self.device)
        return KVSlot(rows, max_length, past, inputs, logits, graph_id)

    def reorder_cache(self, cache, index, within_inputs: bool = False):
        if isinstance(cache, KVSlot):
            return reordered(cache, index, lambda rows, length: self._slot(rows, length).reset())
        return tuple(t.index_select(0, index) for t in cache)

    def forward(self, input_ids, attention_mask, position_ids, cache, last_only=False):
        # the graph always computes logits for every position (accuracy needs them); `last_only` is a hint
        if isinstance(cache, KVSlot):
            return self._static_forward(input_ids, attention_mask, position_ids, cache)
        feeds = {"input_ids": input_ids, "attention_mask": attention_mask}
        if self.takes_positions:
            feeds["position_ids"] = position_ids
        if self.use_cache:
            feeds.update(zip(self.past_names, cache))
        outputs = self.graph.run(feeds, {"total": attention_mask.shape[1]})
        return outputs[0], (tuple(outputs[1:]) if self.use_cache else None)

    def _static_forward(self, input_ids, attention_mask, position_ids, slot: KVSlot):
        width, seq = attention_mask.shape[1], input_ids.shape[1]
        slot.mask[:, :width].copy_(attention_mask)
        slot.write.fill_(width - seq)
        presents = dict(zip(self.present_names, slot.past))  # written in place
        one_token = seq == 1 and width > 1
        if one_token:  # fixed addresses: the step a CUDA graph replays
            slot.ids.copy_(input_ids)
            slot.positions.copy_(position_ids)
            input_ids, position_ids = slot.ids, slot.positions
            presents["logits"] = slot.logits
        feeds = {"input_ids": input_ids, "attention_mask": slot.mask, "cache_position": slot.write}
        if self.takes_positions:
            feeds["position_ids"] = position_ids
        feeds.update(zip(self.past_names, slot.past))
        graph_id = slot.graph_id if one_token and self.cuda_graph else -1
        logits = self.graph.run(feeds, outputs=presents, graph_id=graph_id)[0]
        return logits, slot

    def close(self) -> None:
        self.graph.close()
        self._slots.close()
