"""TensorRT shapes without TensorRT: engine maxima, optimization profiles, engine names and fingerprints.

Pure Python (tested on any machine). Rows are batch x beams (beam search runs batch*beams rows). With a KV
cache an engine has two optimization profiles, both over the same graph:

    0 "prompt": input_ids [rows, 1..max_input], attention_mask [rows, 1..max_input], past.* [rows, H, 0, D]
    1 "step":   input_ids [rows, 1],            attention_mask [rows, 2..max_total], past.* [rows, H, 1..max_total-1, D]

Without a cache one profile covers full recomputation: input_ids / attention_mask [rows, 1..max_total].
"""
from __future__ import annotations

from dataclasses import dataclass

from NNDF.artifacts import safe_name
from NNDF.errors import UsageError
from NNDF.options import ModelOptions, TRTOptions

DEFAULT_POSITIONS = 2048  # for models without a position limit in their config (ALiBi: BLOOM)


@dataclass(frozen=True)
class Range:
    min: int
    opt: int
    max: int

    def __post_init__(self):
        assert 0 <= self.min <= self.opt <= self.max, self


@dataclass(frozen=True)
class EngineShapes:
    rows: Range  # batch * beams
    max_input: int  # longest prompt
    max_output: int  # most new tokens
    max_total: int  # prompt + output


@dataclass(frozen=True)
class Profile:
    name: str
    shapes: dict  # input name -> (min shape, opt shape, max shape)


def model_positions(config) -> int:
    for attr in ("n_positions", "max_position_embeddings", "seq_length"):
        value = getattr(config, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    return DEFAULT_POSITIONS


def engine_shapes(config, options: ModelOptions, trt: TRTOptions) -> EngineShapes:
    """Maxima from the model config, overridable by --n-positions / --input- / --output-profile-max-len."""
    n_pos = trt.n_positions or model_positions(config)
    max_input = min(trt.input_profile_max_len or n_pos, n_pos)
    max_output = min(trt.output_profile_max_len or n_pos, n_pos)
    max_total = min(n_pos, max_input + max_output)
    batch = options.batch_size
    if trt.dynamic_batch:
        low, high = trt.min_dynamic_batch, trt.max_dynamic_batch or batch
        if not low <= batch <= high:
            raise UsageError(f"--dynamic-batch needs --min-dynamic-batch <= --batch-size <= --max-dynamic-batch; "
                             f"got {low} <= {batch} <= {high}")
    else:
        low = high = batch
    beams = options.num_beams
    return EngineShapes(Range(low * beams, batch * beams, high * beams), max_input, max_output, max_total)


def decoder_profiles(shapes: EngineShapes, past_dims: dict[str, tuple[int, int]], takes_positions: bool,
                     use_cache: bool) -> list[Profile]:
    """Profiles for the decoder graph; `past_dims` maps each past input to its (heads, head_dim)."""
    r = shapes.rows

    def seq_range(low: int, high: int) -> Range:
        return Range(low, max(low, min(high, (low + high) // 2)), high)

    def two_d(seq: Range) -> tuple:
        return ((r.min, seq.min), (r.opt, seq.opt), (r.max, seq.max))

    def profile(name: str, new: Range, total: Range, past: Range | None) -> Profile:
        spec = {"input_ids": two_d(new), "attention_mask": two_d(total)}
        if takes_positions:
            spec["position_ids"] = two_d(new)
        for input_name, (heads, dim) in (past_dims.items() if past else ()):
            spec[input_name] = tuple((rows, heads, p, dim) for rows, p in zip((r.min, r.opt, r.max),
                                                                             (past.min, past.opt, past.max)))
        return Profile(name, spec)

    if not use_cache:
        full = seq_range(1, shapes.max_total)
        return [profile("full", full, full, None)]
    prompt = seq_range(1, shapes.max_input)
    return [profile("prompt", prompt, prompt, Range(0, 0, 0)),
            profile("step", Range(1, 1, 1), seq_range(2, shapes.max_total), seq_range(1, shapes.max_total - 1))]


def engine_name(family: str, variant: str, options: ModelOptions, trt: TRTOptions, shapes: EngineShapes) -> str:
    """The seed's naming: model, variant, precision, cache, batch (or range), beams, lengths, postfix."""
    batch = (f"dynbatch{trt.min_dynamic_batch}-{shapes.rows.max // options.num_beams}" if trt.dynamic_batch
             else f"batch{options.batch_size}")
    parts = [family, variant, options.precision, "kv" if options.use_cache else "nokv", batch,
             f"beams{options.num_beams}", f"in{shapes.max_input}", f"out{shapes.max_output}",
             f"pos{shapes.max_total}"]
    if trt.engine_postfix:
        parts.append(trt.engine_postfix)
    return safe_name("engine-" + "-".join(parts))
