"""Measurement bookkeeping: percentiles, iterations / number / duration, benchmark arithmetic."""
import time

import numpy as np
import pytest

from NNDF.options import TimingOptions
from NNDF.timing import Stats, measure


def test_stats_percentiles_match_numpy():
    xs = list(np.random.default_rng(0).exponential(size=101))
    s = Stats.of(xs, 95)
    assert s.p50 == pytest.approx(np.percentile(xs, 50))
    assert s.p90 == pytest.approx(np.percentile(xs, 90))
    assert s.p99 == pytest.approx(np.percentile(xs, 99))
    assert s.pN == pytest.approx(np.percentile(xs, 95))
    assert s.to_json()["p95"] == s.pN and len(s.samples) == 101


def test_measure_runs_warmup_iterations_and_number():
    calls = []

    def call():
        calls.append(1)
        return {"t": float(len(calls))}

    samples = measure(call, TimingOptions(iterations=4, number=3, warmup=2), "x")
    assert len(calls) == 2 + 4 * 3 and len(samples) == 4
    assert samples[0]["t"] == pytest.approx((3 + 4 + 5) / 3)  # the mean of one iteration's calls


def test_measure_honours_duration():
    samples = measure(lambda: {"t": time.sleep(0.01) or 0.0}, TimingOptions(iterations=1, warmup=0, duration=0.1), "x")
    assert len(samples) >= 5


def _rss_mib() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="the kernel's RSS high-water mark")
def test_memory_watch_cpu_reads_the_kernels_peak_without_a_thread():
    import threading

    import torch

    from NNDF.timing import MemoryWatch

    before, threads = _rss_mib(), threading.active_count()
    with MemoryWatch(torch.device("cpu")) as watch:
        assert threading.active_count() == threads  # nothing runs beside what is measured
        block = np.ones(64 * 2**20 // 8 * 4)  # 256 MiB touched, then freed before the block ends
        del block
    assert watch.kind == "peak process RSS (MiB)"
    assert watch.peak_mb >= before + 240 and _rss_mib() < watch.peak_mb - 200


def test_memory_watch_cpu_samples_where_the_kernel_has_no_mark(monkeypatch):
    import torch

    import NNDF.timing as timing

    monkeypatch.setattr(timing, "_CLEAR_REFS", "/nonexistent/clear_refs")
    with timing.MemoryWatch(torch.device("cpu")) as watch:
        block = np.ones(64 * 2**20 // 8 * 4)
        time.sleep(0.05)
        del block
    assert watch.kind == timing.MemoryWatch.SAMPLED and watch._thread is not None
    assert watch.peak_mb >= 250


def test_measure_interleaved_takes_turns(monkeypatch):
    import NNDF.timing as timing

    monkeypatch.setattr(timing, "INTERLEAVE_IDLE", 0.0)
    monkeypatch.setattr(timing, "INTERLEAVE_WARM", 0.0)
    order = []

    def row(name):
        def call():
            order.append(name)
            return {"t": float(len(order))}
        return name, call

    samples = timing.measure_interleaved([row("a"), row("b")], TimingOptions(iterations=2, number=2, warmup=1), "x")
    # the warm-up round: one untimed call each; then per row and round one untimed call and `number` timed ones
    assert "".join(order) == "ab" + "aaabbb" * 2
    assert [len(s) for s in samples] == [2, 2]
    assert samples[0][0]["t"] == pytest.approx((4 + 5) / 2) and samples[1][1]["t"] == pytest.approx((13 + 14) / 2)


def test_measure_interleaved_warms_each_turn_for_a_while(monkeypatch):
    import NNDF.timing as timing

    monkeypatch.setattr(timing, "INTERLEAVE_IDLE", 0.0)
    monkeypatch.setattr(timing, "INTERLEAVE_WARM", 0.05)
    calls = []

    def call():
        calls.append(time.perf_counter())
        time.sleep(0.01)
        return {"t": 0.0}

    timing.measure_interleaved([("a", call)], TimingOptions(iterations=1, number=1, warmup=0), "x")
    assert 5 <= len(calls) - 1 <= 8  # ~0.05 s of 0.01 s untimed calls, then the timed one


def test_paired_ratio_is_round_by_round():
    from NNDF.timing import paired_ratio

    first, row = [10.0, 20.0, 30.0, 40.0, 50.0], [5.0, 10.0, 10.0, 20.0, 25.0]  # 2, 2, 3, 2, 2
    assert paired_ratio(first, row) == pytest.approx((2.0, 2.0, 2.0))
    assert paired_ratio([4.0], [2.0]) == (2.0, 2.0, 2.0)
    low, mid, high = paired_ratio([1.0, 2.0, 3.0, 4.0], [1.0, 1.0, 1.0, 1.0])
    assert (low, mid, high) == pytest.approx(tuple(np.percentile([1, 2, 3, 4], (25, 50, 75))))
