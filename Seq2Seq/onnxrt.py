"""The encoder-decoder kind on ONNX Runtime (and what its engines are built from): the three-graph artifact."""
from __future__ import annotations

from pathlib import Path

from NNDF.backends.onnxrt.artifact import OnnxArtifact
from NNDF.context import RunContext
from NNDF.options import ModelOptions
from Seq2Seq.export import export_seq2seq, validate
from Seq2Seq.ort_steps import Seq2SeqOrtSteps


class Seq2SeqOnnx(OnnxArtifact):
    """`seq2seq-<precision>-<kv|nokv>/`: encoder.onnx, decoder.onnx and, with a KV cache, cache_generator.onnx."""

    prefix = "seq2seq"

    def export(self, model, out_dir: Path, options: ModelOptions) -> dict[str, Path]:
        return export_seq2seq(model, out_dir, options.use_cache, self.spec)

    def steps(self, run: RunContext, paths: dict[str, Path]) -> Seq2SeqOrtSteps:
        return Seq2SeqOrtSteps(paths, run.device, run.options.use_cache, run.options.threads)

    def check(self, model, run: RunContext, paths: dict[str, Path]) -> float:
        return validate(model, lambda: self.steps(run, paths), run.options.use_cache, self.spec, run.options.fp16)

