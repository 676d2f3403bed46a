"""The encoder-decoder kind on TensorRT: encoder, decoder and cross-attention cache-generator engines.

The engine cache, fingerprints, build and load are the `trt` backend's (`NNDF/backends/trt/backend.py`); this adapter
says what the kind adds: one set of optimization profiles per part and `Seq2SeqTrtSteps` over the three engines.

    encoder:          input_ids / attention_mask [batch, 1..max_input] (or pixel_values [batch, 3, H, W])
    cache_generator:  encoder_hidden_states [batch, 1..max_input, hidden]
    decoder (KV):     0 "first": input_ids [batch, 1] (image-to-text: the prompt), past.* [batch, H, 0, D]
                      1 "step":  input_ids [rows, 1], past.* [rows, H, 1..max_output + 1, D]
                      both: encoder_attention_mask [.., 1..max_input], cross.* [.., H, 1..max_input, D]
    decoder (no KV):  input_ids [batch..rows, 1..max_output + 1], encoder_hidden_states, encoder_attention_mask
    decoder (static): 0 "first" / 1 "step" as with KV, every pass one token (`Seq2Seq.static_export`), past.* and
                      present.* at the generation's full length L [.., H, 1..first + max_output, D] in both

Profiles are derived from each input's exported dimension names (batch, seq, encoder_seq, past, max_length), so
fixed dimensions (heads, head size, an image encoder's patch count) come from the ONNX itself.

`batch` rows run the encoder and the first decoder step; beam search then expands them to `rows` = batch x beams.
"""
from __future__ import annotations

from pathlib import Path

from NNDF.backends.trt.backend import TrtAdapter
from NNDF.backends.trt.profiles import EngineShapes, Profile, Range, seq_range
from NNDF.context import RunContext
from NNDF.errors import UsageError
from Seq2Seq.onnxrt import Seq2SeqOnnx
from Seq2Seq.trt_static_steps import Seq2SeqTrtStaticSteps
from Seq2Seq.trt_steps import Seq2SeqTrtSteps


def graph_dims(path: Path) -> dict[str, tuple]:
    """Every input's shape as stored in the ONNX (ints for fixed dims, names for dynamic ones)."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    return {v.name: tuple(d.dim_value if d.HasField("dim_value") else d.dim_param
                          for d in v.type.tensor_type.shape.dim) for v in graph.input}


def _shape_ranges(onnx_shape: tuple, ranges: dict[str, Range]) -> tuple:
    """(min, opt, max) shapes of one input: named dimensions take their range, fixed ones stay."""
    return tuple(tuple(getattr(ranges[d], k) if isinstance(d, str) else d for d in onnx_shape)
                 for k in ("min", "opt", "max"))


def seq2seq_profiles(shapes: EngineShapes, dims: dict[str, dict[str, tuple]], use_cache: bool,
                     first: Range = Range(1, 1, 1), static: bool = False) -> dict[str, list]:
    """Profiles of every part from its inputs' ONNX shapes (`dims[part][input]`, dimension names as exported:
    batch, seq, encoder_seq, past; max_length in the static decoder). `first`: decoder tokens of the first step
    (the start token; a text prompt for image-to-text models)."""
    enc = seq_range(1, shapes.max_input)

    def profile(name: str, part: str, ranges: dict[str, Range]) -> Profile:
        # inputs of fixed shape (the static decoder's cache_position) need no profile
        return Profile(name, {inp: _shape_ranges(shape, ranges) for inp, shape in dims[part].items()
                              if any(isinstance(d, str) for d in shape)})

    encoder_side = {"batch": shapes.batch, "encoder_seq": enc}
    profiles = {"encoder": [profile("encoder", "encoder", encoder_side)]}
    longest = min(first.max + shapes.max_output, shapes.max_total)  # the decoder's position limit caps it
    if not use_cache:
        rows, tokens = shapes.any_rows, seq_range(first.min, longest)
        profiles["decoder"] = [profile("full", "decoder", {"batch": rows, "seq": tokens, "encoder_seq": enc})]
        return profiles
    profiles["cache_generator"] = [profile("cache_generator", "cache_generator", encoder_side)]
    past = seq_range(1, longest)
    if static:  # one token per pass; the buffers' full length is the generation's (up to `longest`)
        profiles["decoder"] = [
            profile("first", "decoder", {"batch": shapes.batch, "encoder_seq": enc, "max_length": past}),
            profile("step", "decoder", {"batch": shapes.rows, "encoder_seq": enc, "max_length": past})]
        return profiles
    profiles["decoder"] = [
        profile("first", "decoder", {"batch": shapes.batch, "seq": first, "encoder_seq": enc, "past": Range(0, 0, 0)}),
        profile("step", "decoder", {"batch": shapes.rows, "seq": Range(1, 1, 1), "encoder_seq": enc, "past": past})]
    return profiles


class Seq2SeqTrt(TrtAdapter):
    """With `--static-cache` the engines are built from the static export (`Seq2Seq.static_export`: the family's
    static-cache step as the decoder graph) and run by `Seq2SeqTrtStaticSteps`."""

    artifact = Seq2SeqOnnx

    def first(self, shapes: EngineShapes) -> Range:
        """Decoder tokens of the first step: the start token (image-to-text: a text prompt)."""
        return Range(1, 1, 1)

    def shapes(self, run: RunContext) -> EngineShapes:
        if run.options.static_cache and getattr(run.options, "fused_decode", None) is False:
            raise UsageError("--no-fused-decode: trt --static-cache engines are built from the family's "
                             "static-cache step; drop --no-fused-decode (or --static-cache)")
        return super().shapes(run)

    def profiles(self, run: RunContext, shapes: EngineShapes, onnx_paths: dict[str, Path]) -> dict[str, list]:
        dims = {part: graph_dims(path) for part, path in onnx_paths.items()}
        return seq2seq_profiles(shapes, dims, run.options.use_cache, self.first(shapes), run.options.static_cache)

    def make_steps(self, run: RunContext, ios: dict, shapes: EngineShapes) -> Seq2SeqTrtSteps:
        if run.options.static_cache:
            longest = min(self.first(shapes).max + shapes.max_output, shapes.max_total)
            return Seq2SeqTrtStaticSteps(ios, run.device, shapes.rows.max, shapes.max_input, longest)
        return Seq2SeqTrtSteps(ios, run.device, run.options.use_cache, shapes.rows.max, shapes.max_input,
                               shapes.max_output)
