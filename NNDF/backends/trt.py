"""The `trt` backend: TensorRT engines built from the decoder ONNX, cached with a fingerprint, run by `TrtSteps`.

Engine cache: `<working-dir>/<FAMILY>/<variant>/<engine name>/decoder.engine` (name per the seed's
conventions, see `trt_profiles.engine_name`) with `fingerprint.json`: the ONNX's identity (its export
fingerprint, sizes and modification times), the profiles, the
TensorRT module and version, the GPU and its compute capability, and the build settings. Any mismatch rebuilds;
an engine that no longer deserializes is rebuilt with a warning; a GPU the TensorRT build cannot run on is a
one-line error. `--decoder-engine PATH` uses the user's engine as is.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from NNDF.artifacts import FINGERPRINT
from NNDF.backends.onnx_artifact import DecoderOnnx
from NNDF.backends.onnx_export import ExportSpec
from NNDF.backends.trt_engine import (BuildSettings, EngineRefused, build_engine, describe, gpu_identity, import_trt,
                                      load_engine)
from NNDF.backends.trt_profiles import EngineShapes, decoder_profiles, engine_name, engine_shapes
from NNDF.backends.trt_steps import TensorRTIO, TrtSteps
from NNDF.context import RunContext
from NNDF.errors import ArtifactError, UsageError
from NNDF.progress import status

ENGINE_FILE = "decoder.engine"


@dataclass(frozen=True)
class EngineBuild:
    """What `--build-only` reports for one engine."""

    backend: str
    engine: str
    built: bool  # False: a current engine was reused
    build_seconds: float | None
    engine_mb: float
    module: str
    gpu: str | None
    compute_capability: str | None

    def row(self) -> dict:
        return {"engine": self.engine, "built now": "yes" if self.built else "reused",
                "build s": self.build_seconds, "MB": self.engine_mb, "TensorRT": self.module, "GPU": self.gpu,
                "CC": self.compute_capability}


def _past_dims(onnx_path: Path) -> tuple[dict[str, tuple[int, int]], bool]:
    """(heads, head_dim) of each past input, and whether the graph takes position ids, read from the ONNX."""
    import onnx

    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    dims = {}
    for value in graph.input:
        if value.name.startswith("past."):
            shape = value.type.tensor_type.shape.dim
            dims[value.name] = (shape[1].dim_value, shape[3].dim_value)
    return dims, any(v.name == "position_ids" for v in graph.input)


def _onnx_identity(path: Path) -> dict:
    """What identifies the ONNX an engine was built from, cheaply (no hashing of gigabytes on every run): the
    export's own fingerprint when it is our artifact, plus name, size and modification time of the graph and
    its external data (a re-export or an edited user file changes them)."""
    files = [path, path.with_name(path.name + ".data")]
    identity = {f.name: [f.stat().st_size, f.stat().st_mtime_ns] for f in files if f.is_file()}
    record = path.parent / FINGERPRINT
    if record.is_file():
        identity["export"] = json.loads(record.read_text())
    return identity


class TensorRTBackend:
    name = "trt"

    def __init__(self, spec: ExportSpec = ExportSpec()):
        self.onnx = DecoderOnnx(spec)
        self.last_build: EngineBuild | None = None

    @property
    def last_max_diff(self) -> float | None:
        return self.onnx.max_diff

    @staticmethod
    def availability(choice: str = "auto") -> tuple[bool, str]:
        try:
            trt = import_trt(choice)
        except Exception as exc:  # BackendUnavailable, or a broken install raising at import
            return False, str(exc)
        gpu = gpu_identity()
        if gpu["gpu"] is None:
            return False, f"{describe(trt)} installed, but torch sees no CUDA GPU"
        return True, (f"{describe(trt)} on {gpu['gpu']} (compute capability {gpu['compute_capability']}); "
                      "whether engines run there is known when the first one loads")

    def _shapes(self, run: RunContext) -> EngineShapes:
        """Profile maxima; checks flags and device before anything needs TensorRT."""
        shapes = engine_shapes(run.source.config, run.options, run.trt)
        if run.device.type != "cuda":
            raise UsageError("the trt backend runs on CUDA: use --device cuda")
        return shapes

    def _fingerprint(self, run, trt, onnx_path: Path, profiles, settings: BuildSettings) -> dict:
        return {"onnx": _onnx_identity(onnx_path),
                "profiles": [repr(p) for p in profiles], "module": describe(trt), **gpu_identity(),
                "settings": {"workspace_mb": settings.workspace_mb, "nvtx": settings.nvtx_verbose,
                             "no_preview_dynamic_shapes": settings.disable_preview_dynamic_shapes}}

    def engine_path(self, run: RunContext, trt, force: bool = False) -> Path:
        """A current engine for this run (built now if missing, stale or `force`d), or the user's engine."""
        if run.trt.decoder_engine:
            path = Path(run.trt.decoder_engine)
            if not path.is_file():
                raise ArtifactError(f"--decoder-engine {path} does not exist")
            return path
        shapes = self._shapes(run)
        onnx_path, _ = self.onnx.path(run)
        dims, positions = _past_dims(onnx_path)
        profiles = decoder_profiles(shapes, dims, positions, run.options.use_cache)
        settings = BuildSettings(run.trt.workspace_mb,
                                 run.store.root.parent / "timing.cache" if run.trt.use_timing_cache else None,
                                 run.trt.disable_preview_dynamic_shapes, run.trt.nvtx_verbose)
        name = engine_name(run.family.name, run.source.variant, run.options, run.trt, shapes)
        fingerprint = self._fingerprint(run, trt, onnx_path, profiles, settings)
        built, seconds = False, None
        if force or not run.store.is_current(name, fingerprint):
            with run.store.build(name, fingerprint) as tmp, status(f"building TensorRT engine {name}"):
                blob, seconds = build_engine(trt, onnx_path, profiles, settings)
                (tmp / ENGINE_FILE).write_bytes(blob)
            built = True
        path = run.store.path(name) / ENGINE_FILE
        gpu = gpu_identity()
        self.last_build = EngineBuild(self.name, name, built, seconds, path.stat().st_size / 2**20, describe(trt),
                                      gpu["gpu"], gpu["compute_capability"])
        return path

    def build(self, run: RunContext) -> EngineBuild:
        """--build-only: build (or find current) engines and report them; nothing runs."""
        self._shapes(run)
        self.engine_path(run, import_trt(run.trt.trt_module))
        return self.last_build

    def setup(self, run: RunContext) -> TrtSteps:
        shapes = self._shapes(run)
        trt = import_trt(run.trt.trt_module)
        path = self.engine_path(run, trt)
        try:
            engine = load_engine(trt, path.read_bytes(), str(path))
        except EngineRefused:
            raise
        except ArtifactError as exc:
            if run.trt.decoder_engine:
                raise
            print(f"warning: cached engine {path.parent.name} is unusable ({exc}); rebuilding", file=sys.stderr)
            path = self.engine_path(run, trt, force=True)
            engine = load_engine(trt, path.read_bytes(), str(path))
        io = TensorRTIO(trt, engine, run.device, run.trt.use_cuda_graph)
        return TrtSteps(io, run.device, run.options.use_cache, shapes.rows.max, shapes.max_total)
