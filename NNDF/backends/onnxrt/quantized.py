"""Quantized graphs as artifacts: `QuantizedOnnx` wraps the float artifact a run of this kind exports (decoder,
encoder-decoder's three graphs, encoder) and quantizes each of its graphs (`NNDF.backends.onnxrt.quantize`).

Stored as `<float artifact>-<int8|int4>/` (e.g. `decoder-fp32-kv-int8/`), with the float artifact's fingerprint
plus the quantization's settings, the family's `QuantSpec` and onnxruntime's version; built atomically from the
float export (reused from the store, exported first when missing). At build time the quantized graphs run
beside the float ones on fixed inputs (the base artifact's `validation_outputs`: teacher-forced log-probabilities
for generative models, the encoder's output for encoders) and `validation.json` records the max |difference|,
the cosine similarity (mean and least) and, for scores (not embeddings, whose largest coordinate means nothing),
the top-1 agreement, and, per graph, the nodes whose weights stayed float (counted in the quantized graph: e.g.
the fused Attention that plain int8 leaves float), which the actions report. The user's `--*-onnx` files are not
quantized (refused in one line).
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from NNDF.backends.onnxrt.artifact import GraphArtifact
from NNDF.backends.onnxrt.quantize import Agreement, Quantization, quantize_file
from NNDF.context import RunContext
from NNDF.errors import UsageError

RECORD = 2  # the layout of validation.json (2: the nodes whose weights stayed float, counted in the graph)


class QuantizedOnnx(GraphArtifact):
    """The graphs of `base` (a float `OnnxArtifact`) with their weights quantized by `quantization`."""

    def __init__(self, base: GraphArtifact, quantization: Quantization):
        super().__init__(base.spec, base.task)
        self.base, self.quantization = base, quantization
        self.static_export = base.static_export
        self.record: dict | None = None  # the validation record: agreement with the float graphs

    def parts(self, use_cache: bool) -> tuple[str, ...]:
        return self.base.parts(use_cache)

    def file_name(self, part: str) -> str:
        return self.base.file_name(part)

    def check_options(self, run: RunContext) -> None:
        self.base.check_options(run)

    def artifact_name(self, run: RunContext) -> str:
        return f"{self.base.artifact_name(run)}-{self.quantization.tag}"

    def fingerprint(self, run: RunContext) -> dict:
        import onnxruntime

        return {**self.base.fingerprint(run), "quantization": self.quantization.settings(), "record": RECORD,
                "quant_spec": repr(self.spec.quantize), "onnxruntime": onnxruntime.__version__,
                "compared": "embeddings" if self.base.validation_embeddings(run) else "scores"}

    def user_paths(self, run: RunContext) -> dict[str, Path] | None:
        if self.base.user_paths(run):
            raise UsageError(f"--quantize {self.quantization.name} quantizes the harness's own export; with your "
                             "--*-onnx files leave --quantize out (give already quantized files if you have them)")
        return None

    def source_model(self, run: RunContext):
        return None  # built from the float graphs

    def building(self, run: RunContext) -> str:
        return f"quantizing {run.source.variant}'s ONNX to {self.quantization.name}"

    def read_validation(self, record: dict) -> None:
        self.record, self.max_diff = record, None  # no PyTorch comparison: the float artifact's is reported

    def steps(self, run: RunContext, paths: dict[str, Path]):
        return self.base.steps(run, paths)

    def build_into(self, model, run: RunContext, out_dir: Path) -> dict:
        floats = self.base.paths(run)[0]
        made = {part: out_dir / self.file_name(part) for part in floats}
        parts = {part: quantize_file(floats[part], made[part], self.quantization, self.spec.quantize)
                 for part in floats}
        agreement = self.agreement(run, floats, made)
        return {"quantization": self.quantization.settings(), "parts": parts,
                "float_max_abs_diff_vs_pytorch": self.base.max_diff, **agreement.record()}

    def agreement(self, run: RunContext, floats: dict[str, Path], quantized: dict[str, Path]) -> Agreement:
        """The quantized graphs' outputs against the float graphs' on the validation inputs."""
        outputs = []
        for paths in (floats, quantized):
            steps = self.base.steps(run, paths)
            try:
                outputs.append(self.base.validation_outputs(run, steps))
            finally:
                steps.close()
        return Agreement.of(*outputs, embeddings=self.base.validation_embeddings(run))

    def notes(self) -> tuple[str, ...]:
        """What the build's validation found, for the action's notes."""
        record = self.record or {}
        quantized = "; ".join(f"{part}: {', '.join(f'{op} {n}' for op, n in info['quantized_ops'].items())}"
                              for part, info in record.get("parts", {}).items())
        floats = Counter()  # nodes whose weights stayed float, by operator, over the parts
        for info in record.get("parts", {}).values():
            floats.update(info["float_weighted"])
        nan, top1 = float("nan"), record.get("top1_agreement_vs_float")
        if top1 is None:  # embeddings: how close they are is the cosine
            found = (f"embeddings' cosine similarity: mean {record.get('mean_cosine_vs_float', nan):.6f}, least "
                     f"{record.get('min_cosine_vs_float', nan):.6f}; max |diff| = "
                     f"{record.get('max_abs_diff_vs_float', nan):.3g}")
        else:
            found = (f"max |diff| = {record.get('max_abs_diff_vs_float', nan):.3g}, top-1 agreement = "
                     f"{100 * top1:.1f}%, least cosine = {record.get('min_cosine_vs_float', nan):.4f}")
        kept = ", ".join(f"{op} {n}" for op, n in floats.items()) or "none"
        return (f"{self.quantization.name} graphs ({quantized}; weights kept float: {kept}) vs the float graphs on"
                f" {record.get('rows_compared')} validation rows: {found} (validated at quantization)",)
