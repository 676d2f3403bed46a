"""`run` and `compare`: the family's golden samples from `checkpoint.toml`, one row per sample and backend (`run`)
or one per backend (`compare`); the kind's evaluator: NNDF/evaluate/checkpoint.py, Encoder/evaluate/checkpoint.py."""
from __future__ import annotations

from NNDF.actions.skeleton import run_action
from NNDF.options import ModelOptions, OptionGroup, SamplingOptions, TimingOptions
from NNDF.results import Report


def run_samples(family: str, backends: tuple[str, ...], options: ModelOptions, sampling: SamplingOptions,
                timing: TimingOptions, *backend_options: OptionGroup) -> Report:
    """`run`: one row per sample and backend."""
    return run_action("run", family, backends, options, (sampling, timing), backend_options)


def compare_backends(family: str, backends: tuple[str, ...], options: ModelOptions, sampling: SamplingOptions,
                     timing: TimingOptions, *backend_options: OptionGroup) -> Report:
    """`compare`: one summary row per backend, side by side."""
    return run_action("compare", family, backends, options, (sampling, timing), backend_options)
