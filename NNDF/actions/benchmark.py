"""`benchmark`: fixed-length random inputs, per-backend timings (the kind's evaluator: NNDF/evaluate/benchmark.py
for generative kinds, Encoder/evaluate/benchmark.py for encoders)."""
from __future__ import annotations

from NNDF.actions.skeleton import run_action
from NNDF.options import BenchmarkOptions, ModelOptions, OptionGroup, SamplingOptions, TimingOptions
from NNDF.results import Report


def benchmark(family: str, backends: tuple[str, ...], options: ModelOptions, sampling: SamplingOptions,
              timing: TimingOptions, bench: BenchmarkOptions, *backend_options: OptionGroup) -> Report:
    return run_action("benchmark", family, backends, options, (sampling, timing, bench), backend_options)
