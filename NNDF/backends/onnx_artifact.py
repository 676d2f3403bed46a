"""The decoder ONNX artifact shared by the `onnxrt` and `trt` backends: export, reuse, or take `--decoder-onnx`.

The export is cached under the working dir as `decoder-<precision>-<kv|nokv>/` with a fingerprint of the
model config, weights identity, export options and library versions; any difference re-exports. A fresh
export is validated against PyTorch (on ONNX Runtime, on the run's device) before it is kept, and the max
difference is recorded in `validation.json` and reported.
"""
from __future__ import annotations

import json
from pathlib import Path

from NNDF.artifacts import digest, weights_identity, write_json_atomic
from NNDF.backends.onnx_export import ExportSpec, export_decoder, validate
from NNDF.backends.ort_steps import OrtSteps
from NNDF.context import RunContext
from NNDF.errors import ArtifactError
from NNDF.progress import status

VALIDATION = "validation.json"  # max |ONNX - PyTorch| measured when the graph was exported


class DecoderOnnx:
    """Where the decoder graph of a run comes from, and how far it was from PyTorch when exported."""

    def __init__(self, spec: ExportSpec):
        self.spec = spec
        self.max_diff: float | None = None

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

    def path(self, run: RunContext, force: bool = False) -> tuple[Path, bool]:
        """The graph to use and whether it was exported just now: the user's file, or a current export
        (made now if missing, stale, or `force`d)."""
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
                max_diff = validate(model, lambda: ort_steps(run, path), run.options.use_cache,
                                    self.spec, run.options.fp16)
                write_json_atomic(tmp / VALIDATION, {"max_abs_diff_vs_pytorch": max_diff})
        self.max_diff = json.loads((folder / VALIDATION).read_text())["max_abs_diff_vs_pytorch"]
        return folder / "model.onnx", fresh


def ort_steps(run: RunContext, path: Path) -> OrtSteps:
    return OrtSteps(path, run.device, run.options.use_cache, run.options.threads)
