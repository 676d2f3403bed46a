"""The `onnxrt` backend: a run's ONNX artifact (`onnx_artifact`: the decoder graph, or an encoder-decoder's
three graphs) on ONNX Runtime. A kind names its artifact class (`artifact`); everything else is shared.

A cached export that no longer loads (truncated, edited) is re-exported with a warning; a fresh export or
the user's `--*-onnx` files that fail are reported, never replaced.
"""
from __future__ import annotations

import logging

from NNDF.backends.base import Backend
from NNDF.backends.onnx_artifact import DecoderOnnx, OnnxArtifact
from NNDF.context import RunContext
from NNDF.errors import ArtifactError

log = logging.getLogger(__name__)


class OnnxRuntimeBackend(Backend):
    name = "onnxrt"
    artifact: type[OnnxArtifact] = DecoderOnnx  # which graphs a run of this kind exports and runs

    def __init__(self, task, spec=None):
        super().__init__(task, spec)
        self.onnx = self.artifact(self.spec, task)

    def export_max_diff(self) -> float | None:
        return self.onnx.max_diff

    @classmethod
    def availability(cls, options: dict | None = None) -> tuple[bool, str]:
        try:
            import onnxruntime as ort
        except ImportError:
            return False, "onnxruntime is not installed (pip install onnxruntime or onnxruntime-gpu)"
        return True, f"onnxruntime {ort.__version__}, providers: {', '.join(ort.get_available_providers())}"

    def build(self, run: RunContext) -> list:
        self.onnx.paths(run)
        return []

    def check_options(self, run: RunContext) -> None:
        """Refuse flags this kind cannot honour on ONNX Runtime (generative: CUDA graphs need the static cache)."""
        run.options.check_graph_needs_static(self.name)

    def setup(self, run: RunContext):
        self.check_options(run)
        paths, fresh = self.onnx.paths(run)
        try:
            return self.onnx.steps(run, paths)
        except ArtifactError as exc:
            if fresh or self.onnx.user_paths(run):
                raise
            log.warning("cached ONNX for %s is unusable (%s); re-exporting", run.source.variant, exc)
            return self.onnx.steps(run, self.onnx.paths(run, force=True)[0])
