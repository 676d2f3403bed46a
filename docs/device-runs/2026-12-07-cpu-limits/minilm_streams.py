"""MiniLM's optimized graph run as it runs (one session, 2 threads, the whole batch) against two "streams": one
session of 1 thread called from two Python threads at once, each on half the batch (ONNX Runtime releases the GIL;
the weights are shared); and 1 x 16 on 1 and 2 threads. Interleaved rounds, 0.2 s idle and two unmeasured calls
before each row, fresh random ids per call. minilm_streams.py GRAPH"""
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnxruntime as ort

path = sys.argv[1]


def session(threads: int):
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"],
                                disabled_optimizers=["SkipLayerNormFusion"])


two, one = session(2), session(1)
rng = np.random.default_rng(0)
pool = ThreadPoolExecutor(2)


def feeds(batch: int, length: int) -> dict:
    return {"input_ids": rng.integers(1000, 30000, (batch, length)).astype(np.int64),
            "attention_mask": np.ones((batch, length), np.int64), "token_type_ids": np.zeros((batch, length), np.int64)}


def streams(s):
    def call(inputs):
        half = len(inputs["input_ids"]) // 2
        parts = [pool.submit(s.run, None, {k: v[:half] for k, v in inputs.items()}),
                 pool.submit(s.run, None, {k: v[half:] for k, v in inputs.items()})]
        return np.concatenate([p.result()[0] for p in parts])
    return call


check = feeds(8, 128)
print("max |streams - whole|:", float(np.abs(streams(one)(check) - two.run(None, check)[0]).max()))
rows = {"1x16, 2 threads": (lambda x: two.run(None, x), (1, 16), 20),
        "1x16, 1 thread": (lambda x: one.run(None, x), (1, 16), 20),
        "8x128, 2 threads": (lambda x: two.run(None, x), (8, 128), 3),
        "8x128, 2 streams of 1 thread": (streams(one), (8, 128), 3),
        "8x128, 2 streams on the 2-thread session": (streams(two), (8, 128), 3)}
results = {name: [] for name in rows}
for round_ in range(13):
    for name, (call, shape, calls) in rows.items():
        time.sleep(0.2)
        call(feeds(*shape))
        call(feeds(*shape))
        times = []
        for _ in range(calls):
            inputs = feeds(*shape)
            start = time.perf_counter()
            call(inputs)
            times.append(time.perf_counter() - start)
        if round_:
            results[name].append(statistics.median(times))
for name, values in results.items():
    print(f"{name}: {statistics.median(values) * 1e3:.2f} ms a forward (median of 12 rounds)")
