"""TensorRT's `--build-only` (the trt backend runs it instead of the action): build (or find current) the
TensorRT engines of a run and report build seconds and sizes; nothing runs."""
from __future__ import annotations

from NNDF import registry
from NNDF.actions.common import finish, open_run
from NNDF.backends.trt.options import TRTOptions
from NNDF.errors import UsageError
from NNDF.options import ModelOptions
from NNDF.results import Report, environment


def build_only(family: str, backends: tuple[str, ...], options: ModelOptions, trt_options: TRTOptions) -> Report:
    if backends != ("trt",):
        raise UsageError(f"--build-only builds TensorRT engines: name only the trt backend (got {', '.join(backends)})")
    run = open_run(family, options, backends, trt_options)
    report = Report("build", run.family.name, run.source.variant, {
        "device": run.device.type, "precision": options.precision, "use_cache": options.use_cache,
        "batch_size": options.batch_size, "dynamic_batch": trt_options.dynamic_batch, "num_beams": run.num_beams},
        environment=environment(run.device))
    report.results.extend(registry.backend(run.family, "trt").build(run))
    finish(run)
    return report
