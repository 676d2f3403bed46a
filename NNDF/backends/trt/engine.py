"""TensorRT engines: which module, building from our ONNX, loading, and the errors users can act on.

Works with `tensorrt` (10.x: networks created with the STRONGLY_TYPED flag; 11.x: always strongly typed) and
`tensorrt_rtx` (strongly typed only), chosen by `--trt-module`. There are no weak-typing builder flags:
precision comes from the ONNX (an fp16 engine is built from the fp16 export; parts a family keeps in fp32 are
fp32 in the graph). Build failures are collected from TensorRT's logger and reported as one line.
"""
from __future__ import annotations

import importlib
import time
from dataclasses import dataclass
from pathlib import Path

from NNDF.backends.trt.profiles import Profile
from NNDF.errors import ArtifactError, BackendUnavailable

MODULES = ("tensorrt", "tensorrt_rtx")
INSTALL_HINT = ("the trt backend needs TensorRT >= 10 (pip install tensorrt, on Linux or Windows with an NVIDIA "
                "GPU) or TensorRT-RTX (pip install tensorrt-rtx)")


def import_trt(choice: str = "auto"):
    """The TensorRT module: `tensorrt` first when `auto`, else exactly the one asked for."""
    names = MODULES if choice == "auto" else (choice,)
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    missing = "neither tensorrt nor tensorrt_rtx is" if choice == "auto" else f"--trt-module {choice} is not"
    raise BackendUnavailable(f"{INSTALL_HINT}; {missing} importable here")


def describe(trt) -> str:
    return f"{trt.__name__} {getattr(trt, '__version__', '?')}"


def gpu_identity() -> dict:
    import torch

    if not torch.cuda.is_available():
        return {"gpu": None, "compute_capability": None}
    major, minor = torch.cuda.get_device_capability()
    return {"gpu": torch.cuda.get_device_name(), "compute_capability": f"{major}.{minor}"}


def _logger(trt):
    """A TensorRT logger that keeps error messages (for one-line reports) and prints nothing below errors."""

    class Collecting(trt.ILogger):
        def __init__(self):
            trt.ILogger.__init__(self)
            self.errors: list[str] = []

        def log(self, severity, msg):
            if severity in (trt.ILogger.Severity.ERROR, trt.ILogger.Severity.INTERNAL_ERROR):
                self.errors.append(str(msg).strip())

    return Collecting()


@dataclass(frozen=True)
class BuildSettings:
    workspace_mb: int = 0
    timing_cache: Path | None = None
    disable_preview_dynamic_shapes: bool = False
    nvtx_verbose: bool = False


def _network_flags(trt) -> int:
    flag = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
    return 0 if flag is None else 1 << int(flag)


def _configure(trt, builder, config, profiles: list[Profile], settings: BuildSettings) -> None:
    if settings.workspace_mb:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, settings.workspace_mb << 20)
    if settings.disable_preview_dynamic_shapes and hasattr(trt.PreviewFeature, "FASTER_DYNAMIC_SHAPES_0805"):
        config.set_preview_feature(trt.PreviewFeature.FASTER_DYNAMIC_SHAPES_0805, False)  # TensorRT 8.6-9.x only
    if settings.nvtx_verbose:
        config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
    if settings.timing_cache is not None and hasattr(config, "create_timing_cache"):
        blob = settings.timing_cache.read_bytes() if settings.timing_cache.is_file() else b""
        config.set_timing_cache(config.create_timing_cache(blob), ignore_mismatch=False)
    for spec in profiles:
        profile = builder.create_optimization_profile()
        for name, (low, opt, high) in spec.shapes.items():
            profile.set_shape(name, low, opt, high)
        config.add_optimization_profile(profile)


def build_engine(trt, onnx_path: Path, profiles: list[Profile], settings: BuildSettings) -> tuple[bytes, float]:
    """Parse the ONNX (external data is found beside it) and build a serialized engine; returns it and the
    build seconds. Raises ArtifactError with TensorRT's own first error and what to change."""
    logger = _logger(trt)
    builder = trt.Builder(logger)
    network = builder.create_network(_network_flags(trt))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)] or logger.errors
        raise ArtifactError(f"TensorRT could not parse {onnx_path}: {errors[0] if errors else 'unknown error'}")
    config = builder.create_builder_config()
    _configure(trt, builder, config, profiles, settings)
    start = time.perf_counter()
    blob = builder.build_serialized_network(network, config)
    seconds = time.perf_counter() - start
    if blob is None:
        message = logger.errors[0] if logger.errors else "no error message"
        if any(w in message.lower() for w in ("memory", "workspace", "allocat")):
            raise ArtifactError(f"engine build ran out of memory ({message[:160]}); raise --workspace-mb, or shrink "
                                "the profiles: --max-dynamic-batch, --input-profile-max-len, --output-profile-max-len, "
                                "--n-positions")
        raise ArtifactError(f"engine build failed: {message[:240]}")
    if settings.timing_cache is not None and hasattr(config, "get_timing_cache"):
        settings.timing_cache.parent.mkdir(parents=True, exist_ok=True)
        settings.timing_cache.write_bytes(bytes(config.get_timing_cache().serialize()))
    return bytes(blob), seconds


class EngineRefused(BackendUnavailable):
    """The engine is well formed but this GPU / TensorRT cannot run it (e.g. TensorRT-RTX on Hopper)."""


def load_engine(trt, blob: bytes, source: str):
    """Deserialize an engine. Unsupported GPU -> EngineRefused (one line naming the GPU and what would work);
    anything else (truncated, other TensorRT version) -> ArtifactError."""
    logger = _logger(trt)
    engine = trt.Runtime(logger).deserialize_cuda_engine(blob) if blob else None
    if engine is not None:
        return engine
    message = logger.errors[-1] if logger.errors else "empty or unreadable engine"
    if "compute capability" in message or "cannot run on this GPU" in message:
        gpu = gpu_identity()
        raise EngineRefused(
            f"{describe(trt)} refuses to run engines on {gpu['gpu']} (compute capability {gpu['compute_capability']}): "
            f"{message[:200]}; use full TensorRT >= 10 on this GPU, or a GPU that {trt.__name__} supports")
    raise ArtifactError(f"cannot load engine {source}: {message[:200]}")
