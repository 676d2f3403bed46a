"""TensorRT shapes without TensorRT: engine maxima, ranges and optimization profiles, engine names.

Pure Python (tested on any machine). The prompt pass runs `batch` rows; beam search then expands them to
batch x beams `rows` for the one-token steps (`EngineShapes`). Each kind turns these into the profiles of its
graphs (CausalLM/trt.py, Seq2Seq/trt.py, Encoder/trt.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from NNDF.artifacts import safe_name
from NNDF.errors import UsageError
from NNDF.model_config import ModelDims
from NNDF.backends.trt.options import TRTOptions
from NNDF.options import ModelOptions

# The engine profiles' longest sequence (prompt + new tokens) where the model has no position table (ALiBi,
# relative positions: `ModelDims.positions` is None). A build-time cap on the engine's shapes (memory, build time),
# not a limit of the model; --n-positions overrides it.
ENGINE_MAX_POSITIONS = 2048


@dataclass(frozen=True)
class Range:
    min: int
    opt: int
    max: int

    def __post_init__(self):
        assert 0 <= self.min <= self.opt <= self.max, self


@dataclass(frozen=True)
class EngineShapes:
    batch: Range  # rows of the prompt pass (and of an encoder)
    rows: Range  # batch * beams: rows of the one-token steps
    max_input: int  # longest prompt
    max_output: int  # most new tokens
    max_total: int  # prompt + output

    @property
    def any_rows(self) -> Range:
        """Rows of a profile that serves the prompt pass and the steps alike."""
        return Range(self.batch.min, self.rows.opt, self.rows.max)


@dataclass(frozen=True)
class Profile:
    name: str
    shapes: dict  # input name -> (min shape, opt shape, max shape)


def model_positions(config) -> int:
    """The engine's position maximum: the model's position table (`ModelDims`), else `ENGINE_MAX_POSITIONS`."""
    return ModelDims.positions_of(config) or ENGINE_MAX_POSITIONS


def engine_shapes(config, options: ModelOptions, trt: TRTOptions, beams: int | None = None) -> EngineShapes:
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
    beams = beams or options.num_beams or 1  # RunContext.num_beams: --num-beams, else the model's generation config
    return EngineShapes(Range(low, batch, high), Range(low * beams, batch * beams, high * beams), max_input,
                        max_output, max_total)


def seq_range(low: int, high: int) -> Range:
    """low..high, optimised for the middle."""
    return Range(low, max(low, min(high, (low + high) // 2)), high)


def two_d(rows: Range, seq: Range) -> tuple:
    return ((rows.min, seq.min), (rows.opt, seq.opt), (rows.max, seq.max))


def four_d(rows: Range, heads: int, seq: Range, head_dim: int) -> tuple:
    """[rows, heads, seq, head_dim] cache tensors."""
    return tuple((r, heads, s, head_dim) for r, s in zip((rows.min, rows.opt, rows.max), (seq.min, seq.opt, seq.max)))


def engine_name(family: str, variant: str, options: ModelOptions, trt: TRTOptions, shapes: EngineShapes) -> str:
    """The TensorRT HuggingFace demo's naming: model, variant, precision, cache, batch (or range), beams, lengths,
    postfix."""
    beams = shapes.rows.opt // shapes.batch.opt  # the effective beam count the shapes were made for
    batch = (f"dynbatch{trt.min_dynamic_batch}-{shapes.rows.max // beams}" if trt.dynamic_batch
             else f"batch{options.batch_size}")
    parts = [family, variant, options.precision, options.cache_layout, batch,
             f"beams{beams}", f"in{shapes.max_input}", f"out{shapes.max_output}",
             f"pos{shapes.max_total}"]
    if trt.engine_postfix:
        parts.append(trt.engine_postfix)
    return safe_name("engine-" + "-".join(parts))
