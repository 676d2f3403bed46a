"""The `build` action: prepare a run's artifacts without running the model, and report what each took.

`python run.py build MODEL BACKEND... [flags]`: for each backend row (onnxrt: one per `--quantize` value) the
backend's `build` exports, quantizes or builds TensorRT engines (or finds them current in the working dir), and
the report gives build seconds and sizes: the backend's own rows where it has them (TensorRT: one per engine,
built now or reused), else one row saying whether its artifacts were built now, reused (current in the working dir:
no build seconds) or the user's own files, with the seconds a build took and the size of the files.
A backend with nothing to build (it runs the model as loaded) is refused before anything loads.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from NNDF import registry
from NNDF.actions.common import backend_rows, finish, open_run
from NNDF.backends.base import Backend
from NNDF.errors import UsageError
from NNDF.options import CacheOptions, DecodingOptions, ModelOptions, OptionGroup
from NNDF.results import Report, environment


@dataclass(frozen=True)
class ArtifactBuild:
    """One backend row's artifacts: whether they were built now, how long that took, and their size on disk."""

    backend: str
    built_now: str | None  # the backend's `made`: "yes", "reused", "your files" (None: it does not say)
    build_seconds: float | None  # None: nothing was built (the seconds to find them current are no build time)
    size_mb: float | None

    def row(self) -> dict:
        made = {} if self.built_now is None else {"built now": self.built_now}
        return {"backend": self.backend, **made, "build s": self.build_seconds, "MB": self.size_mb}


def builders() -> list[str]:
    """The registered backends that have artifacts to build (their class overrides `Backend.build`)."""
    return [name for name in registry.BACKENDS if registry.backend_class(name).build is not Backend.build]


def _settings(run, options: ModelOptions, backend_options) -> dict:
    """The header's settings: those the model's kind reads (an encoder has no KV cache and no beams)."""
    settings = {"device": run.device.type, "precision": options.precision, "batch_size": options.batch_size}
    if CacheOptions in run.family.task.option_groups:
        settings |= {"use_cache": options.use_cache, "static_cache": options.static_cache}
    if DecodingOptions in run.family.task.option_groups:  # TensorRT profiles size their rows by the beams
        settings["num_beams"] = run.num_beams
    for group in backend_options:  # e.g. TensorRT's dynamic batch, which its engines are built for
        if getattr(group, "dynamic_batch", False):
            settings["dynamic_batch"] = True
    return settings


def build(family: str, backends: tuple[str, ...], options: ModelOptions, *backend_options: OptionGroup) -> Report:
    """Build (or find current) the artifacts each named backend runs from; nothing runs."""
    able = builders()
    idle = [name for name in backends if name not in able]
    if idle:
        raise UsageError(f"build: the {idle[0]} backend has nothing to build (it runs the model as loaded); "
                         f"name {' or '.join(able)}")
    run = open_run(family, options, backends, *backend_options)
    report = Report("build", run.family.name, run.source.variant, _settings(run, options, backend_options),
                    environment=environment(run.device))
    for label, backend in backend_rows(run, backends):
        start = time.perf_counter()
        rows = backend.build(run)
        seconds = time.perf_counter() - start
        size, made = backend.model_bytes(), backend.made
        built = None if made in ("reused", "your files") else round(seconds, 3)
        report.results.extend(rows or [ArtifactBuild(label, made, built, size and size / 2 ** 20)])
    finish(run)
    return report
