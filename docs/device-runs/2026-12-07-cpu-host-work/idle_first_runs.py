"""A decoder graph's one-token step after ARGV[2] seconds idle: the time of its 1st, 2nd, ... run (medians of 20 trials):
idle_first_runs.py DIR GAP THREADS."""
import sys, numpy as np, onnxruntime as ort, time, statistics
d = sys.argv[1]; gap = float(sys.argv[2]); threads = int(sys.argv[3])
L = 96
o = ort.SessionOptions(); o.intra_op_num_threads = threads; o.log_severity_level = 3
s = ort.InferenceSession(d + "/model.onnx", o, providers=["CPUExecutionProvider"], disabled_optimizers=["SkipLayerNormFusion"])
past = {i.name: np.zeros((1, 2, L, 32), np.float32) for i in s.get_inputs() if i.name.startswith("past.")}
b = s.io_binding()
feeds = {"input_ids": np.random.randint(0, 4096, (1, 1)).astype(np.int64), "position_ids": np.array([[40]], np.int64),
         "seqlens_k": np.array([40], np.int32), "total_sequence_length": np.array(L, np.int32), "logits_start": np.array([0], np.int64)}
for k, v in {**feeds, **past}.items(): b.bind_cpu_input(k, v)
for k, v in past.items(): b.bind_output(k.replace("past", "present"), "cpu", 0, np.float32, v.shape, v.ctypes.data)
logits = np.zeros((1, 1, 4096), np.float32)
b.bind_output("logits", "cpu", 0, np.float32, logits.shape, logits.ctypes.data)
for _ in range(200): s.run_with_iobinding(b)
traces = []
for trial in range(20):
    time.sleep(gap)
    t0 = time.perf_counter(); tr = []
    for i in range(120):
        t = time.perf_counter(); s.run_with_iobinding(b); tr.append((t - t0, time.perf_counter() - t))
        e = time.perf_counter() + 30e-6
        while time.perf_counter() < e: pass
    traces.append(tr)
out = []
for i in (0, 1, 2, 5, 10, 20, 40, 80, 119):
    out.append(f"{i}@{statistics.median(tr[i][0] for tr in traces)*1e3:.1f}ms:{statistics.median(tr[i][1] for tr in traces)*1e6:.0f}")
print(d.split("/")[-1], "gap", gap, "threads", threads, " ".join(out))
