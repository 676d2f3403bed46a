"""The `onnxrt` backend: a run's ONNX artifact (`onnx_artifact`: the decoder graph, or an encoder-decoder's
three graphs) on ONNX Runtime.

A cached export that no longer loads (truncated, edited) is re-exported with a warning; a fresh export or
the user's `--*-onnx` files that fail are reported, never replaced.
"""
from __future__ import annotations

import sys

from NNDF.backends.onnx_artifact import DecoderOnnx, OnnxArtifact
from NNDF.backends.onnx_export import ExportSpec
from NNDF.context import RunContext
from NNDF.errors import ArtifactError


class OnnxRuntimeBackend:
    name = "onnxrt"

    def __init__(self, spec: ExportSpec = ExportSpec(), artifact: type[OnnxArtifact] = DecoderOnnx):
        self.onnx = artifact(spec)

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

    def setup(self, run: RunContext):
        run.options.check_graph_needs_static(self.name)
        paths, fresh = self.onnx.paths(run)
        try:
            return self.onnx.steps(run, paths)
        except ArtifactError as exc:
            if fresh or self.onnx.user_paths(run):
                raise
            print(f"warning: cached ONNX for {run.source.variant} is unusable ({exc}); re-exporting",
                  file=sys.stderr)
            return self.onnx.steps(run, self.onnx.paths(run, force=True)[0])
