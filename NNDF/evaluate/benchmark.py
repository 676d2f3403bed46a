"""`benchmark` for the generative kinds: fixed-length random inputs, exactly `--output-seq-len` new tokens, per-backend timings.

Per call: prefill / time to first token (prompt pass + first token choice; for encoder-decoder models the
encoder, its cross-attention cache and the first decoder step, with the encoder's own share reported as
"encoder"), end to end, and per-token decode latency TPOT = (end to end - first token) / (new tokens - 1); with
one new token there is no decode step, so TPOT and the bandwidth derived from it are n/a (null in the JSON).
Every call gets fresh random prompt tokens (drawn before the timer starts); EOS is suppressed so every run has
the same length. With `--hf-baseline`, HF `generate` runs on the same inputs in the same session, timed the same
way (first token marked by a logits processor), as an outside reference; with `--static-cache` HF's own static
cache (`cache_implementation="static"`), reported as "hf-generate-static".
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import torch

from NNDF.context import RunContext
from NNDF.decoding import attention_problem, report_settings
from NNDF.errors import UsageError
from NNDF.evaluate import Evaluator, interleave_note, interleaved_call, paired_note
from NNDF.options import BenchmarkOptions, ModelOptions, SamplingOptions, TimingOptions
from NNDF.plot import plot_per_token
from NNDF.results import check_output_path
from NNDF.session import generate_prompt, generation_config, torch_threads
from NNDF.timing import GenerationClock, MemoryWatch, Stats, TokenTrace, measure, measure_interleaved


@dataclass(frozen=True)
class BenchmarkResult:
    backend: str
    prefill_ms: Stats
    tpot_ms: Stats | None  # None: one new token, no decode step to time
    e2e_ms: Stats
    tokens_per_s: float  # batch * new tokens / median end-to-end seconds
    peak_memory_mb: float
    memory_kind: str
    onnx_max_diff: float | None = None
    per_token_ms: tuple[float, ...] = ()  # one traced run (synchronised after every token), for --plot
    encoder_ms: Stats | None = None  # encoder-decoder models: encoder + cross-attention cache (part of prefill)
    model_mb: float | None = None  # MiB on disk of the model files run (graphs + external data; None: frameworks)
    weight_bytes: int | None = None  # what one step reads at least: the model files, or the torch model's parameters

    @property
    def weights_gb_s(self) -> float | None:
        """Achieved bandwidth (gpt-fast's measure): weight bytes read per step / median time per step (TPOT)."""
        if self.weight_bytes is None or self.tpot_ms is None or not self.tpot_ms.p50 > 0:
            return None
        return self.weight_bytes / (self.tpot_ms.p50 * 1e-3) / 1e9

    def row(self) -> dict:
        encoder = {} if self.encoder_ms is None else {"encoder p50 ms": self.encoder_ms.p50}
        tpot = self.tpot_ms
        percentiles = sorted({50, 90, 99, self.prefill_ms.percentile})  # ascending, --percentile among them
        decode = {f"TPOT p{q} ms": "n/a" if tpot is None else tpot.at(q) for q in percentiles}
        gb_s = "n/a" if tpot is None else "" if self.weights_gb_s is None else self.weights_gb_s
        return {"backend": self.backend, **encoder, "prefill p50 ms": self.prefill_ms.p50, **decode,
                "e2e p50 ms": self.e2e_ms.p50, "e2e p99 ms": self.e2e_ms.p99, "tokens/s": self.tokens_per_s,
                "peak MiB": self.peak_memory_mb, "model MiB": "" if self.model_mb is None else self.model_mb,
                "weights GB/s": gb_s}


def _random_prompt(run: RunContext, bench: BenchmarkOptions, generator: torch.Generator):
    """Fresh random tokens of --input-seq-len (the encoder's input for encoder-decoder models)."""
    return run.family.task.random_prompt(run, run.options.batch_size, bench.input_seq_len, generator)


def _summarize(name: str, samples, bench: BenchmarkOptions, batch: int, timing: TimingOptions, memory: MemoryWatch,
               max_diff=None) -> BenchmarkResult:
    pct = timing.percentile
    prefill = [s["prefill"] * 1e3 for s in samples]
    e2e = [s["e2e"] * 1e3 for s in samples]
    steps = bench.output_seq_len - 1  # decode steps after the first token (none: no TPOT)
    tpot = Stats.of([(e - p) / steps for e, p in zip(e2e, prefill)], pct) if steps else None
    e2e_stats = Stats.of(e2e, pct)
    encoder = Stats.of([s["encoder"] * 1e3 for s in samples], pct) if "encoder" in samples[0] else None
    return BenchmarkResult(name, Stats.of(prefill, pct), tpot, e2e_stats,
                           batch * bench.output_seq_len / (e2e_stats.p50 / 1e3), memory.peak_mb, memory.kind, max_diff,
                           encoder_ms=encoder)


@dataclass
class _Row:
    """A backend row to time: one generation per `call` on a fresh random prompt (the clock's seconds), and what its
    result needs besides the samples (the bytes a step reads, taken while the torch model is loaded)."""
    name: str
    backend: object
    steps: object
    call: Callable[[], dict[str, float]]
    config: object
    generator: torch.Generator
    weights: int | None


def _row(run, name, backend, steps, sampling, bench) -> _Row:
    config = generation_config(run, sampling, bench.output_seq_len, min_new_tokens=bench.output_seq_len)
    generator = torch.Generator().manual_seed(sampling.seed)

    def call():
        prompt = _random_prompt(run, bench, generator)
        clock = GenerationClock(run.device)
        generate_prompt(steps, prompt, config, clock)
        return clock.seconds()

    weights = backend.step_bytes()
    if weights is None and backend.runs_torch_model:
        weights = step_bytes(run, run.torch_model())
    return _Row(name, backend, steps, call, config, generator, weights)


def _bench_backend(run, name, backend, steps, sampling, timing, bench) -> BenchmarkResult:
    row = _row(run, name, backend, steps, sampling, bench)
    with MemoryWatch(run.device) as memory:
        samples = measure(row.call, timing, name)
    return _result(run, row, samples, memory, timing, bench)


def _result(run, row: _Row, samples, memory: MemoryWatch, timing, bench) -> BenchmarkResult:
    """The row's result from its samples: the traced run for --plot, the model's size, the bytes a step reads."""
    trace = TokenTrace(run.device)
    if bench.plot:
        generate_prompt(row.steps, _random_prompt(run, bench, row.generator), row.config, trace)
    backend = row.backend
    result = _summarize(row.name, samples, bench, run.options.batch_size, timing, memory, backend.export_max_diff())
    size = backend.model_bytes()
    return dataclasses.replace(result, per_token_ms=trace.per_token_ms(),
                               model_mb=None if size is None else size / 2**20, weight_bytes=row.weights)


def parameter_bytes(model: torch.nn.Module, leave_out: tuple = ()) -> int:
    """Bytes of the parameters a torch model's modules hold, each storage once, less those reached only through the
    modules `leave_out`: a tensor held there and elsewhere too (BART's shared embedding, the encoder's input and the
    decoder's input and head) counts."""
    skipped, seen, storages = {id(m) for m in leave_out}, set(), {}

    def visit(module: torch.nn.Module) -> None:
        if id(module) in skipped or id(module) in seen:
            return
        seen.add(id(module))
        for t in module.parameters(recurse=False):
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        for child in module.children():
            visit(child)

    visit(model)
    return sum(storages.values())


def step_bytes(run, model: torch.nn.Module) -> int:
    """The weight bytes one generation step reads: the model's parameters less what runs once per input (an
    encoder's own weights; with a KV cache, the decoder's cross-attention key and value projections)."""
    once = list(run.family.task.once_per_input(model))
    if run.options.use_cache and run.family.cross_kv:
        once += [m for name, m in model.named_modules() if name.endswith(run.family.cross_kv)]
    return parameter_bytes(model, tuple(once))


def _bench_hf_generate(run, sampling, timing, bench, static: bool) -> BenchmarkResult:
    """HF `generate` on the same kind of inputs: the outside reference for our loop."""
    from transformers import LogitsProcessor, LogitsProcessorList

    model = run.torch_model()
    generator = torch.Generator().manual_seed(sampling.seed)

    class Mark(LogitsProcessor):
        def __init__(self, clock):
            self.clock, self.seen = clock, False

        def __call__(self, input_ids, scores):
            if not self.seen:  # called once the prompt pass produced logits
                self.seen = True
                self.clock.first_token()
            return scores

    static = {"cache_implementation": "static"} if static else {}
    name = "hf-generate-static" if static else "hf-generate"

    def call():
        prompt = _random_prompt(run, bench, generator)
        inputs = run.family.task.hf_generate_inputs(run, prompt)
        clock = GenerationClock(run.device)
        with torch.inference_mode():
            model.generate(**inputs, max_new_tokens=bench.output_seq_len,
                           min_new_tokens=bench.output_seq_len, do_sample=False, num_beams=run.num_beams,
                           use_cache=run.options.use_cache, **static,
                           logits_processor=LogitsProcessorList([Mark(clock)]))
        clock.finished()
        return clock.seconds()

    with MemoryWatch(run.device) as memory:
        samples = measure(call, timing, name)
    result = _summarize(name, samples, bench, run.options.batch_size, timing, memory)
    return dataclasses.replace(result, weight_bytes=step_bytes(run, model))


def _lengths(run: RunContext, bench: BenchmarkOptions) -> tuple[BenchmarkOptions, str | None]:
    """The lengths to measure. Given ones must fit the model's positions (else one line); when both are left to
    their defaults they are halved together until they fit, and the note returned says so. Without a position table
    the prompt must fit memory (`attention_problem`)."""
    default_prompt, default_new = BenchmarkOptions.DEFAULT_LENGTHS
    given = bench.input_seq_len is not None or bench.output_seq_len is not None
    prompt, new = bench.input_seq_len or default_prompt, bench.output_seq_len or default_new
    problem = run.family.task.length_problem(run, prompt, new)
    if problem and given:
        unset = [f"{flag} {value}" for flag, value, typed in (("--input-seq-len", prompt, bench.input_seq_len),
                                                              ("--output-seq-len", new, bench.output_seq_len))
                 if typed is None]
        raise UsageError(problem + (f" ({unset[0]} is the default)" if unset else ""))
    while problem and (prompt, new) != (1, 1):
        prompt, new = max(prompt // 2, 1), max(new // 2, 1)
        problem = run.family.task.length_problem(run, prompt, new)
    if problem:
        raise UsageError(problem)
    memory = attention_problem(run, run.options.batch_size, prompt)
    if memory:
        raise UsageError(f"{memory}: shorten --input-seq-len or lower --batch-size")
    note = None if given or (prompt, new) == (default_prompt, default_new) else (
        f"lengths: the defaults {default_prompt} + {default_new} do not fit {run.source.variant}'s positions; "
        f"measured {prompt} + {new} (set --input-seq-len / --output-seq-len to choose)")
    return dataclasses.replace(bench, input_seq_len=prompt, output_seq_len=new), note


class Benchmark(Evaluator):
    """`benchmark` for the generative kinds: the shared generation loop on random prompts."""

    def __init__(self, action: str, options: ModelOptions, sampling: SamplingOptions, timing: TimingOptions,
                 bench: BenchmarkOptions) -> None:
        super().__init__(action, options, sampling, timing, bench)
        self.sampling, self.timing, self.bench = sampling, timing, bench
        self.together = bench.interleave  # every row set up at once, timed in turns in `end`

    def check(self, task) -> None:
        if self.bench.plot is not None:  # an output path: refused before the run, not after it
            check_output_path(self.bench.plot, "--plot")

    def begin(self, run, report) -> None:
        options, timing = self.options, self.timing
        self.bench, fitted = _lengths(run, self.bench)
        bench = self.bench
        if bench.plot is not None and bench.output_seq_len == 1:
            raise UsageError("--plot: one new token has no decode step, so no per-token latency to plot; give "
                             "--output-seq-len 2 or more, or leave --plot out")
        config = generation_config(run, self.sampling, bench.output_seq_len, min_new_tokens=bench.output_seq_len)
        report.settings = {
            "device": run.device.type, "precision": options.precision, "batch_size": options.batch_size,
            "input_seq_len": bench.input_seq_len, "output_seq_len": bench.output_seq_len,
            **report_settings(options, config), "seed": self.sampling.seed,  # the random prompts' seed too
            "use_cuda_graph": options.use_cuda_graph, "fused_decode": options.fused_decode,
            "torch_compile": options.torch_compile and options.compile_mode, "iterations": timing.iterations,
            "warmup": timing.warmup, "number": timing.number, "interleave": bench.interleave}
        if fitted:
            report.notes.append(fitted)
        if bench.hf_baseline:
            static = options.static_cache and run.family.task.hf_static_refusal is None
            if options.static_cache and not static:
                report.notes.append(f"hf-generate-static not run ({run.family.task.hf_static_refusal}); the "
                                    "baseline row is HF generate with its growing cache")
            report.results.append(_bench_hf_generate(run, self.sampling, timing, bench, static))
            run.release_torch_model()  # the backends load what they run: never two copies on the device at once

    def evaluate(self, run, name: str, backend, steps, report):
        if self.together:  # timed in turns with the other rows in `end`
            return _row(run, name, backend, steps, self.sampling, self.bench)
        report.results.append(_bench_backend(run, name, backend, steps, self.sampling, self.timing, self.bench))

    def _interleaved(self, run, report, rows: list[_Row]) -> None:
        """Every row timed in turns (`measure_interleaved`), each call with its backend's torch threads."""
        with MemoryWatch(run.device) as memory:
            samples = measure_interleaved([(r.name, interleaved_call(run, r.backend, r.call)) for r in rows],
                                          self.timing, "interleaved")
        memory.kind += ", every row set up at once"
        for row, taken in zip(rows, samples):
            with torch_threads(run, row.backend):
                report.results.append(_result(run, row, taken, memory, self.timing, self.bench))
        report.notes.append(interleave_note(self.bench.hf_baseline and "hf-generate"))
        paired = paired_note([(r.name, [s["e2e"] for s in taken]) for r, taken in zip(rows, samples)], "tokens/s")
        if paired:
            report.notes.append(paired)

    def export_notes(self, report, name: str, backend) -> None:
        """A quantized graph's validation (the export's max |diff| is a column of the row)."""
        report.notes.extend(f"{name}: {note}" for note in backend.export_notes())

    def end(self, run, report, outcomes: list) -> None:
        bench, options = self.bench, self.options
        if self.together:
            self._interleaved(run, report, [row for _, row in outcomes])
        report.notes.append(f"memory: {report.results[-1].memory_kind}")
        if bench.plot:
            plot_per_token(report.results, bench.input_seq_len, bench.plot,
                           f"{run.family.name} {run.source.variant}, {run.device.type} {options.precision}, "
                           f"batch {options.batch_size}, prompt {bench.input_seq_len}")
            report.notes.append(f"plot of per-token latency (one traced run per backend): {bench.plot}")
