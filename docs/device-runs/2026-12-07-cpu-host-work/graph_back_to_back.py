"""A decoder graph's one-token step (argv[2] = 1) or prompt pass (argv[2] = 32) repeated back to back, several graphs in
interleaved rounds: graph_back_to_back.py DIR,DIR,... SEQ ROUNDS RUNS (T=1 in the environment: one thread)."""
# back-to-back wall time of step / prompt for several graphs, interleaved rounds
import sys, numpy as np, onnxruntime as ort, time, statistics
dirs = sys.argv[1].split(","); seq = int(sys.argv[2]); rounds = int(sys.argv[3]); n = int(sys.argv[4])
L = 96
sess = []
for d in dirs:
    o = ort.SessionOptions(); o.intra_op_num_threads = int(__import__("os").environ.get("T", "2")); o.log_severity_level = 3
    s = ort.InferenceSession(d + "/model.onnx", o, providers=["CPUExecutionProvider"], disabled_optimizers=["SkipLayerNormFusion"])
    past = {i.name: np.zeros((1, 2, L, 32), np.float32) for i in s.get_inputs() if i.name.startswith("past.")}
    b = s.io_binding()
    feeds = {"input_ids": np.random.randint(0, 4096, (1, seq)).astype(np.int64),
             "position_ids": (np.arange(seq)[None] + (40 if seq == 1 else 0)).astype(np.int64),
             "seqlens_k": np.array([seq - 1 + (40 if seq == 1 else 0)], np.int32),
             "total_sequence_length": np.array(seq if seq > 1 else L, np.int32),
             "logits_start": np.array([-1 if seq > 1 else 0], np.int64)}
    for k, v in {**feeds, **past}.items(): b.bind_cpu_input(k, v)
    for k, v in past.items(): b.bind_output(k.replace("past", "present"), "cpu", 0, np.float32, v.shape, v.ctypes.data)
    logits = np.zeros((1, 1, 4096), np.float32)
    b.bind_output("logits", "cpu", 0, np.float32, logits.shape, logits.ctypes.data)
    sess.append((d.rstrip("/").split("/")[-1], s, b, feeds, past, logits))
res = {}
for r in range(rounds):
    for name, s, b, *_ in sess:
        time.sleep(0.05)
        for _ in range(5): s.run_with_iobinding(b)
        ts = []
        for _ in range(n):
            t = time.perf_counter(); s.run_with_iobinding(b); ts.append(time.perf_counter() - t)
        res.setdefault(name, []).append(statistics.median(ts))
for name, v in res.items():
    print(f"{name:40s} seq {seq}: {statistics.median(v)*1e6:.1f} us (rounds {min(v)*1e6:.0f}-{max(v)*1e6:.0f})")
