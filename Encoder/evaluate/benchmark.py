"""The encoder kind's `benchmark`: latency of one forward over random token inputs, as transformer-deploy
reports it.

Every call draws fresh random token ids [--batch-size, --input-seq-len] (default 128; no padding) before the
clock starts; the device is synchronised before and after the forward (NNDF.timing); `--warmup` untimed calls
come first. Per backend: mean, sd (population, numpy's default, as transformer-deploy's), min, max, p50, p90, p95,
p99 of the milliseconds per forward (and `--percentile` in order among them when it is another one),
sequences/s = batch / mean seconds (the throughput of back-to-back calls), and peak memory over the timed calls
(NNDF.timing.MemoryWatch). `--hf-baseline` adds the HF model's own forward in eager PyTorch ("hf-eager":
`model(**inputs)`, the head's pooling left out) on the same kind of inputs, timed the same way. `--seed` seeds the
inputs.
"""
from __future__ import annotations

import dataclasses

from dataclasses import dataclass

import torch

from Encoder.evaluate.common import timed_forward
from NNDF.errors import UsageError
from NNDF.evaluate import Evaluator, interleave_note, interleaved_call, paired_note
from NNDF.options import BenchmarkOptions, ModelOptions, SamplingOptions, TimingOptions
from NNDF.timing import MemoryWatch, Stats, measure, measure_interleaved

DEFAULT_LENGTH = BenchmarkOptions.DEFAULT_LENGTHS[0]  # 128 tokens
SUMMARY = ("mean", "sd", "min", "max")  # transformer-deploy's statistics, then its percentiles
PERCENTILES = (50, 90, 95, 99)  # (p90 too, as `benchmark`), with --percentile's in order among them


@dataclass(frozen=True)
class ForwardBenchmark:
    backend: str
    latency_ms: Stats  # milliseconds per forward over the timed calls (one sample per iteration: the mean of its
    # --number calls)
    sequences_per_s: float
    peak_memory_mb: float
    memory_kind: str  # what peak_memory_mb measures (device memory on CUDA, process RSS on the CPU)
    model_mb: float | None = None  # MiB on disk of the graph run (with external data; None: frameworks, hf-eager)

    def _latency(self) -> dict:
        """The statistics, then the percentiles ascending (--percentile's among them when it is another one)."""
        lat = self.latency_ms
        percentiles = sorted(set(PERCENTILES) | {lat.percentile})
        return {k: getattr(lat, k) for k in SUMMARY} | {f"p{q}": lat.at(q) for q in percentiles}

    def row(self) -> dict:
        latency = {("mean ms" if k == "mean" else k): v for k, v in self._latency().items()}
        return {"backend": self.backend} | latency | {"sequences/s": self.sequences_per_s,
                                                     "peak MiB": self.peak_memory_mb,
                                                     "model MiB": "" if self.model_mb is None else self.model_mb}

    def to_json(self) -> dict:
        return {"backend": self.backend, "latency_ms": self._latency(), "sequences_per_s": self.sequences_per_s,
                "peak_memory_mb": self.peak_memory_mb, "memory_kind": self.memory_kind, "model_mb": self.model_mb,
                "samples_ms": list(self.latency_ms.samples)}


def _forward_call(run, forward, length: int, seed: int):
    """One timed forward over fresh random inputs (drawn before the clock)."""
    task, batch = run.family.task, run.options.batch_size
    generator = torch.Generator().manual_seed(seed)

    def call():
        return timed_forward(run, forward, task.random_inputs(run, batch, length, generator))

    return call


def _measure(run, name: str, forward, timing: TimingOptions, length: int, seed: int) -> ForwardBenchmark:
    """Time `forward` over fresh random inputs per call."""
    with MemoryWatch(run.device) as memory:
        samples = measure(_forward_call(run, forward, length, seed), timing, name)
    return _result(run, name, samples, timing, memory)


def _result(run, name: str, samples, timing: TimingOptions, memory: MemoryWatch) -> ForwardBenchmark:
    latency = Stats.of([s["forward"] * 1e3 for s in samples], timing.percentile)
    return ForwardBenchmark(name, latency, run.options.batch_size / (latency.mean / 1e3), memory.peak_mb, memory.kind)


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


class Benchmark(Evaluator):
    """`benchmark` for encoder models: timed forwards over random token inputs."""

    def __init__(self, action: str, options: ModelOptions, sampling: SamplingOptions, timing: TimingOptions,
                 bench: BenchmarkOptions) -> None:
        super().__init__(action, options, sampling, timing, bench)
        self.sampling, self.timing, self.bench = sampling, timing, bench
        self.together = bench.interleave  # every row set up at once, timed in turns in `end`

    def run_options(self) -> tuple:
        return (self.bench,)  # trt's sequence optimum

    def begin(self, run, report) -> None:
        options, timing, sampling = self.options, self.timing, self.sampling
        self.length = length = _length(run, self.bench)
        head = run.family.task.head(run.source, options)
        report.settings = {
            "task": head.name, "device": run.device.type, "precision": options.precision,
            "batch_size": options.batch_size, "input_seq_len": length, "iterations": timing.iterations,
            "warmup": timing.warmup, "number": timing.number,
            "torch_compile": options.torch_compile and options.compile_mode,
            "use_cuda_graph": options.use_cuda_graph, "seed": sampling.seed, "interleave": self.bench.interleave}
        if self.bench.hf_baseline:  # first: an ONNX-based backend releases the PyTorch weights
            report.results.append(_hf_eager(run, timing, length, sampling.seed))
            report.notes.append("hf-eager: the HF model's own forward (eager PyTorch, no pooling), same inputs")

    def evaluate(self, run, name: str, backend, steps, report):
        if self.together:  # timed in turns with the other rows in `end`
            return backend, steps
        result = _measure(run, name, steps.forward, self.timing, self.length, self.sampling.seed)
        report.results.append(_sized(result, backend))

    def _interleaved(self, run, report, outcomes: list) -> None:
        """Every row timed in turns (`measure_interleaved`), each call with its backend's torch threads."""
        rows = [(name, interleaved_call(run, backend, _forward_call(run, steps.forward, self.length,
                                                                    self.sampling.seed)))
                for name, (backend, steps) in outcomes]
        with MemoryWatch(run.device) as memory:
            samples = measure_interleaved(rows, self.timing, "interleaved")
        memory.kind += ", every row set up at once"
        for (name, (backend, _)), taken in zip(outcomes, samples):
            report.results.append(_sized(_result(run, name, taken, self.timing, memory), backend))
        report.notes.append(interleave_note(self.bench.hf_baseline and "hf-eager"))
        paired = paired_note([(name, [s["forward"] for s in taken]) for (name, _), taken in zip(outcomes, samples)],
                             "sequences/s")
        if paired:
            report.notes.append(paired)

    def end(self, run, report, outcomes: list) -> None:
        if self.together:
            self._interleaved(run, report, outcomes)
        report.notes.append(f"latency in ms per forward of {self.options.batch_size} x {self.length} random tokens; "
                            f"sequences/s = batch / mean; memory: {report.results[-1].memory_kind}")


def _sized(result: ForwardBenchmark, backend) -> ForwardBenchmark:
    """The row with the size on disk of the graph it ran."""
    size = backend.model_bytes()
    return dataclasses.replace(result, model_mb=None if size is None else size / 2**20)
