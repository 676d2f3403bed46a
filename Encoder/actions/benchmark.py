"""`benchmark` for encoder models: latency of one forward over random token inputs, as seed 002
(transformer-deploy) reports it.

Every call draws fresh random token ids [--batch-size, --input-seq-len] (default 128; no padding) before the
clock starts; the device is synchronised before and after the forward (NNDF.timing); `--warmup` untimed calls
come first. Per backend: mean, sd (population, numpy's default as the seed's), min, max, p50, p90, p95, p99 of
the milliseconds per forward (and `--percentile` when it is another one), sequences/s = batch / mean seconds
(the throughput of back-to-back calls), and peak memory over the timed calls (NNDF.timing.MemoryWatch).
`--hf-baseline` adds the HF model's own forward in eager PyTorch ("hf-eager": `model(**inputs)`, the head's
pooling left out) on the same kind of inputs, timed the same way. `--seed` seeds the inputs.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from Encoder.actions.common import timed_forward
from NNDF.actions.common import backend_steps, finish, note_export_check, open_run
from NNDF.errors import UsageError
from NNDF.options import BenchmarkOptions, ModelOptions, OptionGroup, SamplingOptions, TimingOptions
from NNDF.results import Report, environment
from NNDF.timing import MemoryWatch, measure

DEFAULT_LENGTH = BenchmarkOptions.DEFAULT_LENGTHS[0]  # 128 tokens
REPORTED = (50, 90, 95, 99)  # the percentiles always reported (seed 002: median, 95p, 99p; p90 as `benchmark`)


@dataclass(frozen=True)
class Latency:
    """Milliseconds per forward over the timed calls."""

    mean: float
    sd: float
    min: float
    max: float
    p50: float
    p90: float
    p95: float
    p99: float
    extra: tuple[int, float] | None = None  # (--percentile, value) when it is not one of REPORTED

    @classmethod
    def of(cls, samples_ms: list[float], percentile: int) -> "Latency":
        a = np.asarray(samples_ms, dtype=float)
        p = lambda q: float(np.percentile(a, q))  # noqa: E731 (linear interpolation, numpy's default)
        extra = None if percentile in REPORTED else (percentile, p(percentile))
        return cls(float(a.mean()), float(a.std()), float(a.min()), float(a.max()), *(p(q) for q in REPORTED),
                   extra)

    def to_json(self) -> dict:
        d = {k: getattr(self, k) for k in ("mean", "sd", "min", "max", "p50", "p90", "p95", "p99")}
        return d | ({f"p{self.extra[0]}": self.extra[1]} if self.extra else {})


@dataclass(frozen=True)
class ForwardBenchmark:
    backend: str
    latency_ms: Latency
    sequences_per_s: float
    peak_memory_mb: float
    memory_kind: str  # what peak_memory_mb measures (device memory on CUDA, process RSS on the CPU)
    samples_ms: tuple[float, ...]  # one per timed iteration (the mean of its --number calls)

    def row(self) -> dict:
        lat = self.latency_ms
        row = {"backend": self.backend, "mean ms": lat.mean, "sd": lat.sd, "min": lat.min, "max": lat.max,
               "p50": lat.p50, "p90": lat.p90, "p95": lat.p95, "p99": lat.p99}
        if lat.extra:
            row[f"p{lat.extra[0]}"] = lat.extra[1]
        return row | {"sequences/s": self.sequences_per_s, "peak MiB": self.peak_memory_mb}


def _measure(run, name: str, forward, timing: TimingOptions, length: int, seed: int) -> ForwardBenchmark:
    """Time `forward` over fresh random inputs per call (drawn before the clock)."""
    task, batch = run.family.task, run.options.batch_size
    generator = torch.Generator().manual_seed(seed)

    def call():
        return timed_forward(run, forward, task.random_inputs(run, batch, length, generator))

    with MemoryWatch(run.device) as memory:
        samples = [s["forward"] * 1e3 for s in measure(call, timing, name)]
    latency = Latency.of(samples, timing.percentile)
    return ForwardBenchmark(name, latency, batch / (latency.mean / 1e3), memory.peak_mb, memory.kind,
                            tuple(samples))


def _hf_eager(run, timing: TimingOptions, length: int, seed: int) -> ForwardBenchmark:
    """The HF model's own forward, eager PyTorch: the outside reference."""
    model = run.torch_model()

    @torch.inference_mode()
    def forward(inputs):
        return model(**inputs)

    return _measure(run, "hf-eager", forward, timing, length, seed)


def _length(run, bench: BenchmarkOptions) -> int:
    length = bench.input_seq_len or DEFAULT_LENGTH
    problem = run.family.task.length_problem(run, length)
    if problem:
        raise UsageError(problem)
    return length


def benchmark(family: str, backends: tuple[str, ...], options: ModelOptions, sampling: SamplingOptions,
              timing: TimingOptions, bench: BenchmarkOptions, *backend_options: OptionGroup) -> Report:
    run = open_run(family, options, backends, bench, *backend_options)  # bench: trt's sequence optimum
    length = _length(run, bench)
    head = run.family.task.head(run.source, options)
    report = Report("benchmark", run.family.name, run.source.variant, {
        "task": head.name, "device": run.device.type, "precision": options.precision,
        "batch_size": options.batch_size, "input_seq_len": length, "iterations": timing.iterations,
        "warmup": timing.warmup, "number": timing.number, "torch_compile": options.torch_compile and options.compile_mode,
        "use_cuda_graph": options.use_cuda_graph, "seed": sampling.seed}, environment=environment(run.device))
    if bench.hf_baseline:  # first: an ONNX-based backend releases the PyTorch weights
        report.results.append(_hf_eager(run, timing, length, sampling.seed))
        report.notes.append("hf-eager: the HF model's own forward (eager PyTorch, no pooling), same inputs")
    for name in backends:
        with backend_steps(run, name) as (backend, steps):
            report.results.append(_measure(run, name, steps.forward, timing, length, sampling.seed))
            note_export_check(report, name, backend)
    report.notes.append(f"latency in ms per forward of {options.batch_size} x {length} random tokens; "
                        f"sequences/s = batch / mean; memory: {report.results[-1].memory_kind}")
    finish(run)
    return report

