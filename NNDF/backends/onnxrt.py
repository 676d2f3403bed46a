"""The `onnxrt` backend: export (or reuse, or take `--decoder-onnx`) the decoder graph and run it on ONNX Runtime.

The export is cached under the working dir as `decoder-<precision>-<kv|nokv>/` with a fingerprint of the
model config, weights identity, export options and library versions; any difference re-exports. A fresh
export is validated against PyTorch before it is kept, and the max difference is recorded and reported.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from NNDF.artifacts import digest, weights_identity, write_json_atomic
from NNDF.backends.onnx_export import ExportSpec, export_decoder, validate
from NNDF.backends.ort_steps import OrtSteps
from NNDF.context import RunContext
from NNDF.errors import ArtifactError
from NNDF.progress import status

VALIDATION = "validation.json"  # max |ONNX - PyTorch| measured when the graph was exported


class OnnxRuntimeBackend:
    name = "onnxrt"

    def __init__(self, spec: ExportSpec = ExportSpec()):
        self.spec = spec
        self.last_max_diff: float | None = None  # validation result of the graph in use

    @staticmethod
    def availability() -> tuple[bool, str]:
        try:
            import onnxruntime as ort
        except ImportError:
            return False, "onnxruntime is not installed (pip install onnxruntime or onnxruntime-gpu)"
        return True, f"onnxruntime {ort.__version__}, providers: {', '.join(ort.get_available_providers())}"

    @staticmethod
    def artifact_name(run: RunContext) -> str:
        return f"decoder-{run.options.precision}-{'kv' if run.options.use_cache else 'nokv'}"

    def fingerprint(self, run: RunContext) -> dict:
        import onnx
        import torch
        import transformers

        return {
            "config": digest(run.source.config.to_dict()),
            "weights": weights_identity(run.source.local_dir, run.source.location),
            "export": {"precision": run.options.precision, "use_cache": run.options.use_cache,
                       "device": run.device.type, "spec": repr(self.spec)},
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "onnx": onnx.__version__},
        }

    def onnx_path(self, run: RunContext, force: bool = False) -> tuple[Path, bool]:
        """The decoder graph to run and whether it was exported just now: the user's file, or a current
        export (made now if missing, stale, or `force`d)."""
        if run.options.decoder_onnx:
            path = Path(run.options.decoder_onnx)
            if not path.is_file():
                raise ArtifactError(f"--decoder-onnx {path} does not exist")
            return path, False
        name, fingerprint = self.artifact_name(run), self.fingerprint(run)
        folder = run.store.path(name)
        fresh = force or not run.store.is_current(name, fingerprint) or not (folder / VALIDATION).is_file()
        if fresh:
            model = run.torch_model()
            with run.store.build(name, fingerprint) as tmp, status(f"exporting {run.source.variant} to ONNX"):
                path = export_decoder(model, tmp, run.options.use_cache, self.spec)
                max_diff = validate(model, lambda: self._steps(run, path), run.options.use_cache,
                                    self.spec, run.options.fp16)
                write_json_atomic(tmp / VALIDATION, {"max_abs_diff_vs_pytorch": max_diff})
        self.last_max_diff = json.loads((folder / VALIDATION).read_text())["max_abs_diff_vs_pytorch"]
        return folder / "model.onnx", fresh

    def _steps(self, run: RunContext, path: Path) -> OrtSteps:
        return OrtSteps(path, run.device, run.options.use_cache, run.options.threads)

    def setup(self, run: RunContext) -> OrtSteps:
        path, fresh = self.onnx_path(run)
        try:
            return self._steps(run, path)
        except ArtifactError as exc:
            if fresh or run.options.decoder_onnx:  # a new export or the user's file: report, never replace
                raise
            # a cached export that no longer loads (truncated, edited): rebuild it, loudly
            print(f"warning: cached ONNX for {run.source.variant} is unusable ({exc}); re-exporting",
                  file=sys.stderr)
            return self._steps(run, self.onnx_path(run, force=True)[0])

    def artifacts(self, run: RunContext) -> list[str]:
        return [self.artifact_name(run)]
