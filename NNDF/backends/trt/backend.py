"""The `trt` backend: TensorRT engines built from a run's ONNX parts, cached with a fingerprint, run by steps.

Engine cache: `<working-dir>/<FAMILY>/<variant>/<engine name>/<part>.engine` (one engine per ONNX part: `decoder`, or
`encoder` / `decoder` / `cache_generator`; name per the TensorRT HuggingFace demo's conventions, see
`NNDF.backends.trt.profiles.engine_name`) with `fingerprint.json`: each ONNX's identity (its export fingerprint, sizes
and modification times), the profiles, the TensorRT module and version, the GPU and its compute capability, and the
build settings. Any mismatch rebuilds; an engine whose content no longer matches the digest recorded at build
(`NNDF/artifacts.py`), or that no longer deserializes, is rebuilt with a warning; a GPU the TensorRT build cannot run
on is a one-line error. `--decoder-engine PATH` (with `--encoder-engine` and `--cache-generator-engine` for
encoder-decoder models, all or nothing) uses the user's engines as they are, once their inputs and outputs fit the
model (`NNDF/integrity.py`: names, vocabulary, layers, heads, dtype; written against TensorRT's API and not verified
with TensorRT here).
The backend is kind-neutral: the kind's `TrtAdapter` (named in its `Task.adapters`) says which ONNX artifact the
engines are built from, their shapes and profiles, and the steps over the loaded engines (CausalLM/trt.py,
Seq2Seq/trt.py, Vision2Seq/backends.py, Encoder/trt.py).
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from NNDF.artifacts import FINGERPRINT
from NNDF.backends.base import Adapter, Backend, option_group
from NNDF.backends.onnxrt.artifact import OnnxArtifact, graph_bytes, user_files
from NNDF.backends.trt.engine import (BuildSettings, EngineRefused, build_engine, describe, gpu_identity, import_trt,
                                      load_engine)
from NNDF.backends.trt.profiles import EngineShapes, engine_name, engine_shapes
from NNDF.backends.trt.steps import TensorRTIO
from NNDF.context import RunContext
from NNDF.errors import ArtifactError
from NNDF.integrity import check_user_engine
from NNDF.backends.trt.options import TRTOptions
from NNDF.progress import status

log = logging.getLogger(__name__)


def engine_file(part: str) -> str:
    return f"{part}.engine"


@dataclass(frozen=True)
class EngineBuild:
    """What the `build` action reports for one engine."""

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


class TrtAdapter(Adapter):
    """What a kind builds and runs on TensorRT. `shapes`, `engine_name` and `check_engine` default to what the
    generative kinds share; `profiles` and `make_steps` are each kind's own."""

    artifact: type[OnnxArtifact]  # the ONNX parts engines are built from

    def shapes(self, run: RunContext) -> EngineShapes:
        """Profile maxima; checks flags before anything needs TensorRT (`open_run` checked the device)."""
        return engine_shapes(run.source.config.get_text_config(decoder=True), run.options, run.options_of(TRTOptions),
                             beams=run.num_beams)

    def profiles(self, run: RunContext, shapes, onnx_paths: dict[str, Path]) -> dict[str, list]:
        """The optimization profiles of each part's engine."""
        raise NotImplementedError

    def make_steps(self, run: RunContext, ios: dict, shapes):
        """The step functions over the loaded engines ({part: `TensorRTIO`})."""
        raise NotImplementedError

    def engine_name(self, run: RunContext, shapes) -> str:
        """The engine folder's name (`profiles.engine_name`: the TensorRT HuggingFace demo's conventions)."""
        return engine_name(run.family.name, run.source.variant, run.options, run.options_of(TRTOptions), shapes)

    def check_engine(self, trt, engine, run: RunContext, part: str, path: Path) -> None:
        """ArtifactError when the user's `--<part>-engine` does not fit the run's model (before it is used)."""
        check_user_engine(trt, engine, run, part, path)


class TensorRTBackend(Backend):
    name = "trt"
    devices = ("cuda",)

    def __init__(self, task, spec=None, adapter=None, fused=None, fused_support=None):
        super().__init__(task, spec, adapter, fused, fused_support)
        self.kind: TrtAdapter = adapter(self.spec, task)
        self.onnx = self.kind.artifact(self.spec, task)
        self.last_builds: list[EngineBuild] = []

    def export_max_diff(self) -> float | None:
        return self.onnx.max_diff

    @classmethod
    def availability(cls, options: dict | None = None) -> tuple[bool, str]:
        try:
            trt = import_trt(option_group(options, TRTOptions).trt_module)
        except Exception as exc:  # BackendUnavailable, or a broken install raising at import
            return False, str(exc)
        gpu = gpu_identity()
        if gpu["gpu"] is None:
            return False, f"{describe(trt)} installed, but torch sees no CUDA GPU"
        return True, (f"{describe(trt)} on {gpu['gpu']} (compute capability {gpu['compute_capability']}); "
                      "whether engines run there is known when the first one loads")

    # --- what the kind decides (its `TrtAdapter`) ---

    def profiles(self, run: RunContext, shapes, onnx_paths: dict[str, Path]) -> dict[str, list]:
        return self.kind.profiles(run, shapes, onnx_paths)

    def make_steps(self, run: RunContext, ios: dict, shapes):
        return self.kind.make_steps(run, ios, shapes)

    def engine_name(self, run: RunContext, shapes) -> str:
        return self.kind.engine_name(run, shapes)

    def check_engine(self, trt, engine, run: RunContext, part: str, path: Path) -> None:
        self.kind.check_engine(trt, engine, run, part, path)

    # --- shared: shapes, the engine cache, loading ---

    def _shapes(self, run: RunContext):
        return self.kind.shapes(run)

    def _fingerprint(self, trt, onnx_paths: dict[str, Path], profiles: dict, settings: BuildSettings) -> dict:
        return {"onnx": {part: _onnx_identity(path) for part, path in onnx_paths.items()},
                "profiles": {part: [repr(p) for p in ps] for part, ps in profiles.items()}, "module": describe(trt),
                **gpu_identity(),
                "settings": {"workspace_mb": settings.workspace_mb, "nvtx": settings.nvtx_verbose,
                             "no_preview_dynamic_shapes": settings.disable_preview_dynamic_shapes}}

    def user_engines(self, run: RunContext) -> dict[str, Path] | None:
        return user_files(run, "engine", run.options_of(TRTOptions))

    def engine_paths(self, run: RunContext, trt, force: bool = False) -> dict[str, Path]:
        """Current engines for this run ({part: path}; built now if missing, stale or `force`d), or the user's."""
        user = self.user_engines(run)
        if user:
            return user
        shapes = self._shapes(run)
        onnx_paths, _ = self.onnx.paths(run)
        profiles = self.profiles(run, shapes, onnx_paths)
        flags = run.options_of(TRTOptions)
        settings = BuildSettings(flags.workspace_mb,
                                 run.store.root.parent / "timing.cache" if flags.use_timing_cache else None,
                                 flags.disable_preview_dynamic_shapes, flags.nvtx_verbose)
        name = self.engine_name(run, shapes)
        fingerprint = self._fingerprint(trt, onnx_paths, profiles, settings)
        seconds = {}
        with run.store.must_build(name, fingerprint, force=force) as built:
            if built:
                seconds = self._build_engines(run, trt, name, fingerprint, onnx_paths, profiles, settings)
        paths = {part: run.store.path(name) / engine_file(part) for part in onnx_paths}
        gpu = gpu_identity()
        self.last_builds = [EngineBuild(self.name, f"{name}/{engine_file(part)}", built, seconds.get(part),
                                        path.stat().st_size / 2**20, describe(trt), gpu["gpu"],
                                        gpu["compute_capability"]) for part, path in paths.items()]
        return paths

    @staticmethod
    def _build_engines(run: RunContext, trt, name: str, fingerprint: dict, onnx_paths: dict[str, Path],
                       profiles: dict, settings: BuildSettings) -> dict[str, float]:
        """Build artifact `name`'s engines, one per graph; returns the seconds each took."""
        seconds = {}
        with run.store.build(name, fingerprint, graph_bytes(onnx_paths)) as tmp:  # engines: about the graphs
            for part, onnx_path in onnx_paths.items():
                with status(f"building TensorRT engine {name} ({part})"):
                    blob, seconds[part] = build_engine(trt, onnx_path, profiles[part], settings)
                (tmp / engine_file(part)).write_bytes(blob)
        return seconds

    def build(self, run: RunContext) -> list[EngineBuild]:
        """The `build` action: build (or find current) engines and report them; nothing runs."""
        self._shapes(run)
        self.engine_paths(run, import_trt(run.options_of(TRTOptions).trt_module))
        return self.last_builds

    def _load_all(self, trt, paths: dict[str, Path]) -> dict:
        return {part: load_engine(trt, path.read_bytes(), str(path)) for part, path in paths.items()}

    def setup(self, run: RunContext):
        shapes = self._shapes(run)
        trt = import_trt(run.options_of(TRTOptions).trt_module)
        paths = self.engine_paths(run, trt)
        try:
            engines = self._load_all(trt, paths)
        except EngineRefused:
            raise
        except ArtifactError as exc:
            if self.user_engines(run):
                raise
            folder = next(iter(paths.values())).parent.name
            log.warning("cached engine %s is unusable (%s); rebuilding", folder, exc)
            engines = self._load_all(trt, self.engine_paths(run, trt, force=True))
        if self.user_engines(run):  # ours are built from checked graphs; the user's are checked before use
            for part, engine in engines.items():
                self.check_engine(trt, engine, run, part, paths[part])
        ios = {part: TensorRTIO(trt, engine, run.device, run.options.use_cuda_graph) for part, engine in engines.items()}
        return self.make_steps(run, ios, shapes)
