"""Measurement: warm-up, synchronised timers, percentiles, peak memory.

`measure` runs a callable `warmup` times untimed, then at least `iterations` times (and for at least
`duration` seconds), each iteration calling it `number` times; it returns one sample per iteration (the
mean of its calls); `measure_interleaved` times several rows in turns (`benchmark --interleave`). The device
is synchronised around every timed region, so GPU work is counted where it runs. `MemoryWatch` reports the peak
during a region: device memory on CUDA (the torch allocator's peak plus whatever other libraries hold, read from
the driver), on the CPU the resident set size's high-water mark the Linux kernel keeps (reset when the region
starts), or, where the kernel offers none, the RSS sampled every 2 ms.
"""
from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np
import psutil
import torch

from NNDF.generation import Observer
from NNDF.options import TimingOptions
from NNDF.progress import bar


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass(frozen=True)
class Stats:
    """Summary of raw samples (milliseconds or any unit); keeps the samples for JSON."""

    p50: float
    p90: float
    p99: float
    pN: float  # the user's --percentile
    percentile: int
    mean: float
    min: float
    max: float
    samples: tuple[float, ...]
    p95: float = 0.0  # transformer-deploy's statistics (encoder benchmarks) besides the ones above
    sd: float = 0.0  # population standard deviation (numpy's default, as transformer-deploy)

    @classmethod
    def of(cls, samples, percentile: int) -> "Stats":
        a = np.asarray(samples, dtype=float)
        p = lambda q: float(np.percentile(a, q))  # noqa: E731 (linear interpolation, numpy's default)
        return cls(p(50), p(90), p(99), p(percentile), percentile, float(a.mean()), float(a.min()),
                   float(a.max()), tuple(float(x) for x in a), p(95), float(a.std()))

    def at(self, q: int) -> float:
        """The q-th percentile: --percentile's (`pN`) or one of the fields above."""
        return self.pN if q == self.percentile else getattr(self, f"p{q}")

    def to_json(self) -> dict:
        d = asdict(self)
        d[f"p{self.percentile}"] = d.pop("pN")
        return d


def measure(call: Callable[[], dict[str, float]], timing: TimingOptions, desc: str) -> list[dict[str, float]]:
    """Per-iteration samples of the timings `call` returns (each a dict of seconds)."""
    for _ in bar(range(timing.warmup), desc=f"{desc} warm-up"):
        call()
    samples: list[dict[str, float]] = []
    start = time.perf_counter()
    progress = bar(desc=desc, total=timing.iterations)
    while len(samples) < timing.iterations or time.perf_counter() - start < timing.duration:
        calls = [call() for _ in range(timing.number)]
        samples.append({k: sum(c[k] for c in calls) / timing.number for k in calls[0]})
        progress.update(1)
    progress.close()
    return samples


INTERLEAVE_IDLE = 0.05  # seconds idle before each row's turn: ONNX Runtime's CPU threads spin ~30 ms after a run
INTERLEAVE_WARM = 0.05  # seconds of untimed calls (at least one) then: caches an idle core lost take that to refill


def measure_interleaved(rows: list[tuple[str, Callable[[], dict[str, float]]]], timing: TimingOptions,
                        desc: str) -> list[list[dict[str, float]]]:
    """Per row, its samples as `measure` gives them, the rows timed in turns: `warmup` untimed rounds, then rounds
    until every row has `iterations` samples and `duration` seconds have passed. A row's turn: INTERLEAVE_IDLE
    seconds idle (the row before stops spinning), untimed calls for INTERLEAVE_WARM seconds, at least one (its
    caches warm again, as `measure`'s back-to-back calls have them: one call was not enough for a 2 ms forward),
    then one iteration of `number` calls. Load from other processes and the machine's drift then hit every row
    alike, and each round's rows run within moments of each other."""
    def turn(call, timed: bool):
        time.sleep(INTERLEAVE_IDLE)
        until = time.perf_counter() + INTERLEAVE_WARM
        call()
        while time.perf_counter() < until:
            call()
        if timed:
            calls = [call() for _ in range(timing.number)]
            return {k: sum(c[k] for c in calls) / timing.number for k in calls[0]}

    for _ in bar(range(timing.warmup), desc=f"{desc} warm-up"):
        for _, call in rows:
            turn(call, False)
    samples: list[list[dict[str, float]]] = [[] for _ in rows]
    start = time.perf_counter()
    progress = bar(desc=desc, total=timing.iterations)
    while len(samples[0]) < timing.iterations or time.perf_counter() - start < timing.duration:
        for taken, (_, call) in zip(samples, rows):
            taken.append(turn(call, True))
        progress.update(1)
    progress.close()
    return samples


def paired_ratio(first: list[float], row: list[float]) -> tuple[float, float, float]:
    """Quartiles (p25, p50, p75) of the ratios first[i] / row[i] of two rows' times measured in the same round
    (`measure_interleaved`): the row's rate over the first row's, the machine's drift between rounds cancelled."""
    ratios = [a / b for a, b in zip(first, row)]
    if len(ratios) < 2:
        return ratios[0], ratios[0], ratios[0]
    low, mid, high = (float(q) for q in np.percentile(ratios, (25, 50, 75)))
    return low, mid, high


class MemoryWatch:
    """Peak memory over a `with` block, in MiB: device memory on CUDA, process RSS on the CPU.

    On the CPU the peak is the kernel's own high-water mark (`VmHWM`, reset through /proc/self/clear_refs as the
    block starts): exact, and nothing runs beside what is measured. A thread sampling the RSS every 2 ms instead
    (where the kernel has no resettable mark; `kind` says so) takes the GIL and a core 500 times a second: on 2
    cores it slowed a 2.4M-parameter model's one-token step by 3-10%."""

    SAMPLED = "peak process RSS, sampled every 2 ms (MiB)"

    def __init__(self, device: torch.device):
        self.device, self.peak_mb, self.kind = device, 0.0, ""
        self._stop = threading.Event()
        self._thread = None

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            self.kind = "device memory (peak torch allocations + other libraries, MiB)"
        elif _reset_high_water_mark():
            self.kind = "peak process RSS (MiB)"
        else:
            self.kind = self.SAMPLED
            self._process = psutil.Process()
            self._sample()  # a block that ends before the thread's first look still has a peak
            self._thread = threading.Thread(target=self._sample_rss, daemon=True)
            self._thread.start()
        return self

    def _sample(self):
        self.peak_mb = max(self.peak_mb, self._process.memory_info().rss / 2**20)

    def _sample_rss(self):
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(0.002)

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            free, total = torch.cuda.mem_get_info(self.device)
            others = (total - free) - torch.cuda.memory_reserved(self.device)  # held outside torch (e.g. ORT)
            self.peak_mb = (torch.cuda.max_memory_allocated(self.device) + max(others, 0)) / 2**20
        elif self._thread is None:
            self.peak_mb = _high_water_mark_kib() / 2**10
        else:
            self._stop.set()
            self._thread.join()
            self._sample()
        return False


_STATUS, _CLEAR_REFS = "/proc/self/status", "/proc/self/clear_refs"


def _reset_high_water_mark() -> bool:
    """Set the kernel's RSS high-water mark of this process to its current RSS (Linux 4.0 and later: writing 5 to
    clear_refs); whether it could, and the mark can be read."""
    try:
        with open(_CLEAR_REFS, "w") as f:
            f.write("5")
        return _high_water_mark_kib() > 0
    except (OSError, ValueError):
        return False


def _high_water_mark_kib() -> int:
    with open(_STATUS) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise ValueError(f"{_STATUS} has no VmHWM")


class GenerationClock(Observer):
    """Synchronised timestamps: start, encoder done (encoder-decoder models), first token, end."""

    def __init__(self, device):
        self.device = device
        sync(device)
        self.start = time.perf_counter()
        self.first = self.end = self.encoder = None

    def encoded(self):
        sync(self.device)
        self.encoder = time.perf_counter()

    def first_token(self):
        sync(self.device)
        self.first = time.perf_counter()

    def finished(self):
        sync(self.device)
        self.end = time.perf_counter()

    def seconds(self) -> dict[str, float]:
        times = {"prefill": self.first - self.start, "e2e": self.end - self.start}
        if self.encoder is not None:  # part of the prefill
            times["encoder"] = self.encoder - self.start
        return times


class TokenTrace(Observer):
    """Synchronises after every token: per-token latencies (ms) of one run. Never used for the timed runs,
    whose single synchronisation at the end lets the device run ahead as it would in production."""

    def __init__(self, device):
        self.device, self.stamps = device, []

    def token(self, step):
        sync(self.device)
        self.stamps.append(time.perf_counter())

    def per_token_ms(self) -> tuple[float, ...]:
        return tuple((b - a) * 1e3 for a, b in zip(self.stamps, self.stamps[1:]))
