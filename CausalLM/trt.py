"""The decoder-only kind on TensorRT: one engine built from the decoder graph (`DecoderOnnx`), with these
optimization profiles. The prompt pass runs `batch` rows; beam search then expands them to batch x beams
`rows` for the one-token steps. With a KV cache the engine has two optimization profiles, both over the same graph:

    0 "prompt": input_ids [batch, 1..max_input], attention_mask [batch, 1..max_input], past.* [batch, H, 0, D]
    1 "step":   input_ids [rows, 1],            attention_mask [rows, 2..max_total],
                past.* [rows, H, 1..max_total-1, D]

Without a cache one profile covers full recomputation: input_ids / attention_mask [batch..rows, 1..max_total].
A static-cache graph (`--static-cache`) has the mask and past.* at the generation's full length L (prompt + new
tokens, 2..max_total) in both profiles; the prompt profile differs in its token count and rows.
"""
from __future__ import annotations

from pathlib import Path

from CausalLM.onnxrt import DecoderOnnx
from NNDF.backends.trt.backend import TrtAdapter
from NNDF.backends.trt.profiles import EngineShapes, Profile, Range, four_d, seq_range, two_d
from CausalLM.trt_steps import TrtSteps
from NNDF.context import RunContext


def _past_dims(onnx_path: Path) -> tuple[dict[str, tuple[int, int]], bool]:
    """(heads, head_dim) of each past input, and whether the graph takes position ids, read from the ONNX."""
    import onnx

    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    dims = {}
    for value in graph.input:
        if value.name.startswith("past."):
            shape = value.type.tensor_type.shape.dim
            dims[value.name] = (shape[1].dim_value, shape[3].dim_value)
    return dims, any(v.name == "position_ids" for v in graph.input)


def decoder_profiles(shapes: EngineShapes, past_dims: dict[str, tuple[int, int]], takes_positions: bool,
                     use_cache: bool, static: bool = False) -> list[Profile]:
    """Profiles for the decoder graph; `past_dims` maps each past input to its (heads, head_dim)."""

    def profile(name: str, r: Range, new: Range, total: Range, past: Range | None) -> Profile:
        spec = {"input_ids": two_d(r, new), "attention_mask": two_d(r, total)}
        if takes_positions:
            spec["position_ids"] = two_d(r, new)
        for input_name, (heads, dim) in (past_dims.items() if past else ()):
            spec[input_name] = four_d(r, heads, past, dim)
        return Profile(name, spec)

    if not use_cache:
        full = seq_range(1, shapes.max_total)
        return [profile("full", shapes.any_rows, full, full, None)]
    prompt = seq_range(1, shapes.max_input)
    if static:
        length = seq_range(2, shapes.max_total)
        return [profile("prompt", shapes.batch, prompt, length, length),
                profile("step", shapes.rows, Range(1, 1, 1), length, length)]
    return [profile("prompt", shapes.batch, prompt, prompt, Range(0, 0, 0)),
            profile("step", shapes.rows, Range(1, 1, 1), seq_range(2, shapes.max_total),
                    seq_range(1, shapes.max_total - 1))]


class DecoderTrt(TrtAdapter):
    artifact = DecoderOnnx

    def profiles(self, run: RunContext, shapes: EngineShapes, onnx_paths: dict[str, Path]) -> dict[str, list]:
        dims, positions = _past_dims(onnx_paths["decoder"])
        return {"decoder": decoder_profiles(shapes, dims, positions, run.options.use_cache, run.options.static_cache)}

    def make_steps(self, run: RunContext, ios: dict, shapes: EngineShapes) -> TrtSteps:
        return TrtSteps(ios["decoder"], run.device, run.options.use_cache, shapes.rows.max, shapes.max_total)
