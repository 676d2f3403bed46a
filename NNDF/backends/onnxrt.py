"""The `onnxrt` backend: the decoder graph (`onnx_artifact.DecoderOnnx`) on ONNX Runtime (`ort_steps.OrtSteps`).

A cached export that no longer loads (truncated, edited) is re-exported with a warning; a fresh export or
the user's `--decoder-onnx` that fails is reported, never replaced.
"""
from __future__ import annotations

import sys

from NNDF.backends.onnx_artifact import DecoderOnnx, ort_steps
from NNDF.backends.onnx_export import ExportSpec
from NNDF.backends.ort_steps import OrtSteps
from NNDF.context import RunContext
from NNDF.errors import ArtifactError


class OnnxRuntimeBackend:
    name = "onnxrt"

    def __init__(self, spec: ExportSpec = ExportSpec()):
        self.onnx = DecoderOnnx(spec)

    @property
    def last_max_diff(self) -> float | None:
        return self.onnx.max_diff

    @staticmethod
    def availability() -> tuple[bool, str]:
        try:
            import onnxruntime as ort
        except ImportError:
            return False, "onnxruntime is not installed (pip install onnxruntime or onnxruntime-gpu)"
        return True, f"onnxruntime {ort.__version__}, providers: {', '.join(ort.get_available_providers())}"

    def setup(self, run: RunContext) -> OrtSteps:
        path, fresh = self.onnx.path(run)
        try:
            return ort_steps(run, path)
        except ArtifactError as exc:
            if fresh or run.options.decoder_onnx:
                raise
            print(f"warning: cached ONNX for {run.source.variant} is unusable ({exc}); re-exporting",
                  file=sys.stderr)
            return ort_steps(run, self.onnx.path(run, force=True)[0])
