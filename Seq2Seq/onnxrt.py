"""The encoder-decoder kind on ONNX Runtime (and what its engines are built from): the three-graph artifact; with
`--static-cache`, the family's graphs built from the weights (`Seq2Seq.ort_fused`) in its place on onnxrt, and
for TensorRT the static export (`Seq2Seq.static_export`: the decoder is the family's static-cache step)."""
from __future__ import annotations

from pathlib import Path

import torch

from NNDF.backends.onnxrt.artifact import GraphArtifact, OnnxArtifact
from NNDF.context import RunContext
from NNDF.options import ModelOptions
from Seq2Seq.export import TEXT_ENCODER, EncoderInputs, export_encoder, export_seq2seq, validate
from Seq2Seq.ort_steps import Seq2SeqOrtSteps


class Seq2SeqOnnx(OnnxArtifact):
    """`seq2seq-<precision>-<kv|nokv|static>/`: encoder.onnx, decoder.onnx and, with a KV cache,
    cache_generator.onnx (`static`: the static export, which only `trt` builds engines from)."""

    prefix = "seq2seq"
    static_export = False  # a static cache runs the family's built graphs (`fused`)
    encoder_inputs: EncoderInputs = TEXT_ENCODER

    @property
    def encoder_names(self) -> tuple[str, ...]:
        return self.encoder_inputs.names

    def module(self, model):
        """The module in the encoder-decoder shape Seq2Seq's steps and exports run (image-to-text wraps it)."""
        return model

    def export(self, model, out_dir: Path, options: ModelOptions) -> dict[str, Path]:
        return export_seq2seq(self.module(model), out_dir, options.use_cache, self.spec, self.encoder_inputs)

    def build_into(self, model, run: RunContext, out_dir: Path) -> dict:
        if not run.options.static_cache:
            return super().build_into(model, run, out_dir)
        from Seq2Seq.static_export import EXPORT_SETTINGS, export_static, step_class, validate_static

        step = step_class(run)(model, None, EXPORT_SETTINGS)  # eager: the export traces its one-token step
        made = export_static(self.module(model), step, out_dir, self.spec, self.encoder_inputs)
        del step  # its concatenated weight copies
        return {"max_abs_diff_vs_pytorch": validate_static(self.module(model), made, run.device, self.spec,
                                                           run.options.fp16, self.encoder_inputs,
                                                           run.options.threads)}

    def export_encoder(self, model, path: Path) -> None:
        """The encoder graph alone, for built graphs that leave the encoder to the export."""
        export_encoder(self.module(model), path, self.spec, self.encoder_inputs)

    def validation_encoder(self, run: RunContext) -> dict:
        """Two rows of encoder inputs for validating built graphs: random token ids, the second row right-padded."""
        ids = torch.randint(0, run.source.dims.vocab, (2, 6), generator=torch.Generator().manual_seed(0))
        mask = torch.ones_like(ids)
        mask[1, 4:] = 0
        return {"input_ids": ids, "attention_mask": mask}

    def steps(self, run: RunContext, paths: dict[str, Path]) -> Seq2SeqOrtSteps:
        return Seq2SeqOrtSteps(paths, run.device, run.options.use_cache, run.options.threads, self.encoder_names)

    def check(self, model, run: RunContext, paths: dict[str, Path]) -> float:
        return validate(self.module(model), lambda: self.steps(run, paths), run.options.use_cache, self.spec,
                        run.options.fp16, self.encoder_inputs)

    def fused(self, builder, run: RunContext) -> GraphArtifact:
        from Seq2Seq.ort_fused import fused_artifact

        return fused_artifact(self, run, builder)
