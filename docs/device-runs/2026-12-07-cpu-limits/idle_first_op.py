"""The first torch operations after an idle gap: a one-element `fill_` timed four times in a row after sleeping
1 ms to 0.5 s (median of 25 gaps each), one thread, nothing else running. idle_first_op.py"""
import statistics
import time

import torch

torch.set_num_threads(1)
x = torch.ones(1, 32, dtype=torch.int64)
print("gap s: us of the 1st / 2nd / 3rd / 4th fill_ after it")
for gap in (0.001, 0.01, 0.03, 0.06, 0.1, 0.2, 0.5):
    samples = []
    for _ in range(25):
        time.sleep(gap)
        stamps = [time.perf_counter()]
        for _ in range(4):
            x.fill_(1)
            stamps.append(time.perf_counter())
        samples.append([b - a for a, b in zip(stamps, stamps[1:])])
    print(gap, " / ".join(f"{statistics.median(c) * 1e6:.1f}" for c in zip(*samples)))
