"""The encoder kind on TensorRT: one engine built from the PLAIN encoder export (`EncoderOnnx`; ONNX
Runtime's fused contrib operators mean nothing to TensorRT), with one optimization profile over every input:

    input_ids, attention_mask[, token_type_ids]   [batch (min, opt, max), sequence (min, opt, max)]

- batch: transformer-deploy's `--batch-size MIN OPT MAX` (`TRTOptions.batch_profile`, also `--batch-profile`), else the
  `--dynamic-batch` range (--min-dynamic-batch, --batch-size, --max-dynamic-batch), else the run's batch;
- sequence: `--seq-len MIN OPT MAX`, else (1, the run's length, the model's limit `TextEncoder.max_length`).
  The run's length is the benchmark's `--input-seq-len` where the action hands the run its `BenchmarkOptions`,
  else the benchmark's default (128), capped at the limit.

The engine cache, fingerprints (which include these profiles), builds and loading are the `trt` backend's
(`NNDF/backends/trt/backend.py`); this adapter computes the shapes (pure Python, tested without TensorRT), names
the engine as the decoder engines are named (model, variant, task, precision, batch, sequence, postfix), checks a user's
`--encoder-engine` against the model and head, and runs `TrtEncoderSteps`.
"""
from __future__ import annotations

from pathlib import Path

from Encoder.export import encoder_mismatch
from Encoder.onnxrt import EncoderOnnx
from Encoder.trt_steps import EncoderShapes, TrtEncoderSteps
from NNDF.artifacts import safe_name
from NNDF.backends.trt.backend import TrtAdapter
from NNDF.backends.trt.options import TRTOptions
from NNDF.backends.trt.profiles import Profile, Range, two_d
from NNDF.context import RunContext
from NNDF.errors import ArtifactError, UsageError
from NNDF.integrity import engine_signature, onnx_signature
from NNDF.options import BenchmarkOptions, ModelOptions
from NNDF.parts import part_flag

DEFAULT_LENGTH = BenchmarkOptions.DEFAULT_LENGTHS[0]  # the profile's optimum when the run names no length


def batch_range(options: ModelOptions, trt: TRTOptions) -> Range:
    """Rows: the batch profile, else the --dynamic-batch range, else exactly --batch-size."""
    batch = options.batch_size
    if trt.batch_profile and trt.dynamic_batch:
        raise UsageError("--batch-size min opt max (or --batch-profile) and --dynamic-batch both set the engine's "
                         "batch range: give one")
    if trt.batch_profile:
        low, opt, high = trt.batch_profile
        if not low <= batch <= high:
            raise UsageError(f"--batch-size {batch} is outside the batch profile {low} {opt} {high}")
        return Range(low, opt, high)
    if trt.dynamic_batch:
        low, high = trt.min_dynamic_batch, trt.max_dynamic_batch or batch
        if not low <= batch <= high:
            raise UsageError(f"--dynamic-batch needs --min-dynamic-batch <= --batch-size <= --max-dynamic-batch; "
                             f"got {low} <= {batch} <= {high}")
        return Range(low, batch, high)
    return Range(batch, batch, batch)


def seq_range(trt: TRTOptions, limit: int, length: int | None = None) -> Range:
    """Tokens per row: --seq-len, else 1 .. the model's `limit`, optimised for `length` (the run's)."""
    if trt.seq_len:
        low, opt, high = trt.seq_len
        if high > limit:
            raise UsageError(f"--seq-len {low} {opt} {high}: the model takes at most {limit} tokens; give a max "
                             f"<= {limit}")
        return Range(low, opt, high)
    return Range(1, min(length or DEFAULT_LENGTH, limit), limit)


def encoder_shapes(options: ModelOptions, trt: TRTOptions, limit: int, length: int | None = None) -> EncoderShapes:
    return EncoderShapes(batch_range(options, trt), seq_range(trt, limit, length))


def encoder_profile(shapes: EncoderShapes, input_names) -> Profile:
    """One profile: every input [batch, sequence]."""
    return Profile("encoder", {name: two_d(shapes.batch, shapes.seq) for name in input_names})


def encoder_engine_name(family: str, variant: str, task: str, options: ModelOptions, trt: TRTOptions,
                        shapes: EncoderShapes) -> str:
    """engine-<family>-<variant>-<task>-<precision>-batch<min-opt-max | N>-seq<min-opt-max>[-<postfix>]."""
    b, s = shapes.batch, shapes.seq
    batch = f"batch{b.min}" if b.min == b.max else f"batch{b.min}-{b.opt}-{b.max}"
    parts = [family, variant, task, options.precision, batch, f"seq{s.min}-{s.opt}-{s.max}"]
    return safe_name("engine-" + "-".join(parts + ([trt.engine_postfix] if trt.engine_postfix else [])))


class EncoderTrt(TrtAdapter):
    artifact = EncoderOnnx  # the plain export

    def shapes(self, run: RunContext) -> EncoderShapes:
        length = run.options_of(BenchmarkOptions).input_seq_len
        return encoder_shapes(run.options, run.options_of(TRTOptions), self.task.max_length(run), length)

    def profiles(self, run: RunContext, shapes: EncoderShapes, onnx_paths: dict[str, Path]) -> dict[str, list]:
        signature = onnx_signature(onnx_paths["encoder"])
        names = list(signature.inputs) if signature else list(self.task.input_names(run))
        return {"encoder": [encoder_profile(shapes, names)]}

    def engine_name(self, run: RunContext, shapes: EncoderShapes) -> str:
        head = self.task.head(run.source, run.options)
        return encoder_engine_name(run.family.name, run.source.variant, head.name, run.options,
                                   run.options_of(TRTOptions), shapes)

    def check_engine(self, trt, engine, run: RunContext, part: str, path: Path) -> None:
        problem = encoder_mismatch(engine_signature(trt, engine), run, noun="engine")
        if problem:
            raise ArtifactError(f"{part_flag(part, 'engine')} {path} {problem}")

    def make_steps(self, run: RunContext, ios: dict, shapes: EncoderShapes) -> TrtEncoderSteps:
        output = self.task.head(run.source, run.options).output
        return TrtEncoderSteps(ios["encoder"], run.device, shapes, output, run.options.use_cuda_graph)
