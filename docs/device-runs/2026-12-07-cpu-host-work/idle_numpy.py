"""A fixed numpy workload on one core after GAP seconds idle: the time of its 1st, 2nd, ... call: idle_numpy.py GAP."""
import time, numpy as np, statistics
a = np.random.rand(64, 64).astype(np.float32)
def work():
    s = 0
    for _ in range(40): s += (a @ a)[0, 0]
    return s
for _ in range(200): work()
import sys
gap = float(sys.argv[1])
traces = []
for trial in range(15):
    time.sleep(gap)
    t0 = time.perf_counter(); tr = []
    for i in range(150):
        t = time.perf_counter(); work(); tr.append((t - t0, time.perf_counter() - t))
    traces.append(tr)
for i in (0, 1, 2, 5, 10, 20, 40, 80, 149):
    print(f"iter {i:3d} at {statistics.median(tr[i][0] for tr in traces)*1e3:6.2f} ms: {statistics.median(tr[i][1] for tr in traces)*1e6:7.1f} us")
