"""Measurement bookkeeping: percentiles, iterations / number / duration, benchmark arithmetic."""
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
    import time

    samples = measure(lambda: {"t": time.sleep(0.01) or 0.0}, TimingOptions(iterations=1, warmup=0, duration=0.1), "x")
    assert len(samples) >= 5
