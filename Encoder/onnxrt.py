"""The encoder kind on ONNX Runtime: its ONNX artifacts (the `trt` backend builds engines from the plain one).

- `EncoderOnnx`: `encoder-<task>-<precision>/encoder.onnx`, the plain export (`Encoder/export.py`), validated
  against PyTorch; the user's `--encoder-onnx` file instead when given (checked against the model and head).
- `OrtEncoderOnnx`: what onnxrt runs. By default ONNX Runtime's transformer optimizer over the plain export,
  its own artifact `encoder-<task>-<precision>-ortopt/` (fingerprint: the plain export's, plus the optimizer's
  settings and onnxruntime's version), validated against PyTorch too; its fused-operator counts are logged and
  kept in its `validation.json` (`fused_operators`). With `--no-ort-optimize`, or a user's file, the plain graph.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

from Encoder.export import (CPU_UNFUSED, PREPARE, RECIPE, VALIDATION_TEXTS, encoder_mismatch, export_encoder,
                            optimize_for_ort, validate_encoder)
from Encoder.ort_steps import OrtEncoderSteps
from NNDF.backends.onnxrt.artifact import VALIDATION, OnnxArtifact
from NNDF.backends.onnxrt.options import ORTOptions
from NNDF.context import RunContext
from NNDF.errors import ArtifactError
from NNDF.integrity import onnx_signature
from NNDF.options import ModelOptions
from NNDF.parts import part_flag

log = logging.getLogger(__name__)


class EncoderOnnx(OnnxArtifact):
    """The plain encoder export of the run's head."""

    prefix = "encoder"

    def artifact_name(self, run: RunContext) -> str:
        return f"{self.prefix}-{self.task.head(run.source, run.options).name}-{run.options.precision}"

    def fingerprint(self, run: RunContext) -> dict:
        record = super().fingerprint(run)
        head = self.task.head(run.source, run.options)
        record["export"].update(head=head.name, pooling=repr(self.task.pooling(run.source)),
                                inputs=list(self.task.input_names(run)), recipe=RECIPE)
        return record

    def build_into(self, model, run: RunContext, out_dir: Path) -> dict:
        from Encoder.model import encoder_head

        head = encoder_head(run)  # `model` with the run's head and pooling
        made = self.export(head, out_dir, run.options)
        return {"max_abs_diff_vs_pytorch": self.check(head, run, made)}

    def export(self, model, out_dir: Path, options: ModelOptions) -> dict[str, Path]:
        """`model`: the run's `EncoderHead`."""
        return {"encoder": export_encoder(model, out_dir, self.spec)}

    def steps(self, run: RunContext, paths: dict[str, Path], cuda_graph: bool | None = None) -> OrtEncoderSteps:
        output = self.task.head(run.source, run.options).output
        graph = run.options.use_cuda_graph if cuda_graph is None else cuda_graph
        return OrtEncoderSteps(paths["encoder"], run.device, output, run.options.threads, graph)

    def check(self, model, run: RunContext, paths: dict[str, Path]) -> float:
        """`model`: the run's `EncoderHead`; the graph runs uncaptured on the run's device."""
        batch = self.task.encode(run, list(VALIDATION_TEXTS)).inputs
        alone = self.task.encode(run, list(VALIDATION_TEXTS[:1])).inputs
        return validate_encoder(model, self.steps(run, paths, cuda_graph=False), batch, alone, self.spec,
                                run.options.fp16)

    def validation_outputs(self, run: RunContext, steps):
        """[N, C] rows two graphs are compared on (`--quantize`): the output for `VALIDATION_TEXTS`, one row per
        text (per token for token classification)."""
        out = steps.forward(self.task.encode(run, list(VALIDATION_TEXTS)).inputs)
        return out.reshape(-1, out.shape[-1]).float().cpu()

    def validation_embeddings(self, run: RunContext) -> bool:
        return self.task.head(run.source, run.options).architecture is None  # no head: sentence embeddings

    def check_options(self, run: RunContext) -> None:
        """Nothing to refuse: an encoder's one forward pass has fixed shapes per input shape, so CUDA graphs need
        no static cache (one graph per shape), and --torch-compile concerns the frameworks backend."""

    def check_user_file(self, run: RunContext, part: str, path: Path) -> None:
        sig = onnx_signature(path)
        problem = encoder_mismatch(sig, run) if sig is not None else None
        if problem:
            raise ArtifactError(f"{part_flag(part, 'onnx')} {path} {problem}")


class OrtEncoderOnnx(EncoderOnnx):
    """The graph onnxrt runs: ONNX Runtime's transformer optimizer over the plain export (its own artifact), or
    the plain export itself (--no-ort-optimize, or the user's file)."""

    def __init__(self, spec, task):
        super().__init__(spec, task)
        self.plain = EncoderOnnx(spec, task)
        self.fused_operators: dict[str, int] | None = None  # operator -> count, when the optimizer ran

    def optimizes(self, run: RunContext) -> bool:
        return run.options_of(ORTOptions).ort_optimize and not self.user_paths(run)

    def artifact_name(self, run: RunContext) -> str:
        return self.plain.artifact_name(run) + "-ortopt"

    def fingerprint(self, run: RunContext) -> dict:
        import onnxruntime

        dims = run.source.dims
        record = self.plain.fingerprint(run)
        record["ort_optimizer"] = {"model_type": "bert", "num_heads": dims.heads, "hidden_size": dims.hidden,
                                   "use_gpu": run.device.type == "cuda", "onnxruntime": onnxruntime.__version__,
                                   "prepare": PREPARE,
                                   "unfused": [] if run.device.type == "cuda" else list(CPU_UNFUSED)}
        return record

    def paths(self, run: RunContext, force: bool = False) -> tuple[dict[str, Path], bool]:
        if not self.optimizes(run):
            paths, fresh = self.plain.paths(run, force)
            self.max_diff, self.fused_operators = self.plain.max_diff, None
            return paths, fresh
        self.plain.paths(run)  # exported (or found current) first, outside this artifact's build
        paths, fresh = super().paths(run, force)
        record = json.loads((run.store.path(self.artifact_name(run)) / VALIDATION).read_text())
        self.fused_operators = record.get("fused_operators", {})
        return paths, fresh

    def build_into(self, model, run: RunContext, out_dir: Path) -> dict:
        from Encoder.model import encoder_head

        plain = self.plain.paths(run)[0]["encoder"]
        out = out_dir / self.file_name("encoder")
        fused = optimize_for_ort(plain, out, run.source.dims, use_gpu=run.device.type == "cuda")
        counts = ", ".join(f"{op} {n}" for op, n in sorted(fused.items())) or "nothing"
        log.info("ONNX Runtime's transformer optimizer fused %s in %s", counts, run.source.variant)
        if "Attention" not in fused:
            log.warning("ONNX Runtime's optimizer fused no Attention in %s (fused: %s); onnxrt runs attention "
                        "unfused", run.source.variant, counts)
        return {"max_abs_diff_vs_pytorch": self.check(encoder_head(run), run, {"encoder": out}),
                "fused_operators": fused}

