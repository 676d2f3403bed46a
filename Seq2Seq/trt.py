"""The `trt` backend for encoder-decoder models: encoder, decoder and cross-attention cache-generator engines.

The shared engine cache, fingerprints, build and load live in `NNDF/backends/trt.py`; this module says what
differs: one set of optimization profiles per part and `Seq2SeqTrtSteps` over the three engines.

    encoder:          input_ids / attention_mask [batch, 1..max_input]
    cache_generator:  encoder_hidden_states [batch, 1..max_input, hidden]
    decoder (KV):     0 "first": input_ids [batch, 1], past.* [batch, H, 0, D]
                      1 "step":  input_ids [rows, 1], past.* [rows, H, 1..max_output, D]
                      both: encoder_attention_mask [.., 1..max_input], cross.* [.., H, 1..max_input, D]
    decoder (no KV):  input_ids [batch..rows, 1..max_output + 1], encoder_hidden_states, encoder_attention_mask

`batch` rows run the encoder and the first decoder step; beam search then expands them to `rows` = batch x beams.
"""
from __future__ import annotations

from pathlib import Path

from NNDF.backends.onnx_export import ExportSpec
from NNDF.backends.trt import TensorRTBackend
from NNDF.backends.trt_profiles import EngineShapes, Profile, Range, four_d, seq_range, three_d, two_d
from NNDF.context import RunContext
from Seq2Seq.onnxrt import Seq2SeqOnnx
from Seq2Seq.trt_steps import Seq2SeqTrtSteps


def _graph_dims(path: Path) -> dict[str, tuple]:
    """Every input's shape as stored in the ONNX (ints for fixed dims, names for dynamic ones)."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    return {v.name: tuple(d.dim_value if d.HasField("dim_value") else d.dim_param
                          for d in v.type.tensor_type.shape.dim) for v in graph.input}


def seq2seq_profiles(shapes: EngineShapes, dims: dict[str, dict[str, tuple]], use_cache: bool) -> dict[str, list]:
    """Profiles of every part; `dims[part][input]` is the input's ONNX shape (heads, head_dim, hidden size)."""
    enc_len = seq_range(1, shapes.max_input)
    width = lambda part, name: dims[part][name][-1]  # noqa: E731 (hidden size)
    profiles = {"encoder": [Profile("encoder", {"input_ids": two_d(shapes.batch, enc_len),
                                                "attention_mask": two_d(shapes.batch, enc_len)})]}
    if not use_cache:
        rows, dec_len = shapes.any_rows, seq_range(1, shapes.max_output + 1)
        profiles["decoder"] = [Profile("full", {
            "input_ids": two_d(rows, dec_len), "encoder_attention_mask": two_d(rows, enc_len),
            "encoder_hidden_states": three_d(rows, enc_len, width("decoder", "encoder_hidden_states"))})]
        return profiles
    profiles["cache_generator"] = [Profile("cache_generator", {"encoder_hidden_states": three_d(
        shapes.batch, enc_len, width("cache_generator", "encoder_hidden_states"))})]

    def decoder(name: str, rows: Range, past: Range) -> Profile:
        spec = {"input_ids": two_d(rows, Range(1, 1, 1)), "encoder_attention_mask": two_d(rows, enc_len)}
        for input_name, shape in dims["decoder"].items():
            if input_name.startswith(("past.", "cross.")):
                spec[input_name] = four_d(rows, shape[1], past if input_name.startswith("past.") else enc_len,
                                          shape[3])
        return Profile(name, spec)

    profiles["decoder"] = [decoder("first", shapes.batch, Range(0, 0, 0)),
                           decoder("step", shapes.rows, seq_range(1, shapes.max_output))]
    return profiles


class Seq2SeqTensorRTBackend(TensorRTBackend):
    def __init__(self, spec: ExportSpec = ExportSpec()):
        super().__init__(spec, Seq2SeqOnnx)

    def profiles(self, run: RunContext, shapes: EngineShapes, onnx_paths: dict[str, Path]) -> dict[str, list]:
        dims = {part: _graph_dims(path) for part, path in onnx_paths.items()}
        return seq2seq_profiles(shapes, dims, run.options.use_cache)

    def make_steps(self, run: RunContext, ios: dict, shapes: EngineShapes) -> Seq2SeqTrtSteps:
        return Seq2SeqTrtSteps(ios, run.device, run.options.use_cache, shapes.rows.max, shapes.max_input,
                               shapes.max_output)
