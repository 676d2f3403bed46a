"""ONNX Runtime's profile of a decoder graph's step or prompt pass, by op type: graph_profile.py DIR SEQ RUNS [THREADS]."""
import sys, json, numpy as np, onnxruntime as ort, collections, os, time
d = sys.argv[1]; seq = int(sys.argv[2]); n = int(sys.argv[3]); threads = int(sys.argv[4]) if len(sys.argv) > 4 else 2
o = ort.SessionOptions(); o.enable_profiling = True; o.intra_op_num_threads = threads; o.log_severity_level = 3
o.profile_file_prefix = "graph_profile"
s = ort.InferenceSession(d + "/model.onnx", o, providers=["CPUExecutionProvider"], disabled_optimizers=["SkipLayerNormFusion"])
L = 96
past = {i.name: np.zeros((1, 2, L, 32), np.float32) for i in s.get_inputs() if i.name.startswith("past.")}
b = s.io_binding()
feeds = {"input_ids": np.random.randint(0, 4096, (1, seq)).astype(np.int64),
         "position_ids": (np.arange(seq)[None] + (40 if seq == 1 else 0)).astype(np.int64),
         "seqlens_k": np.array([seq - 1 + (40 if seq == 1 else 0)], np.int32),
         "total_sequence_length": np.array(seq if seq > 1 else L, np.int32),
         "logits_start": np.array([-1 if seq > 1 else 0], np.int64)}
for k, v in {**feeds, **past}.items():
    b.bind_cpu_input(k, v)
for k, v in past.items():
    b.bind_output(k.replace("past", "present"), "cpu", 0, np.float32, v.shape, v.ctypes.data)
logits = np.zeros((1, 1, 4096), np.float32)
b.bind_output("logits", "cpu", 0, np.float32, logits.shape, logits.ctypes.data)
for _ in range(20): s.run_with_iobinding(b)
t = time.perf_counter()
for _ in range(n): s.run_with_iobinding(b)
wall = (time.perf_counter() - t) / n
f = s.end_profiling()
ev = json.load(open(f))
agg = collections.Counter(); cnt = collections.Counter(); runs = 0; model = []
for e in ev:
    if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
        agg[e["args"]["op_name"]] += e["dur"]; cnt[e["args"]["op_name"]] += 1
    if e.get("cat") == "Session" and e["name"] == "model_run":
        model.append(e["dur"])
runs = len(model)
print(f"{d.split('/')[-1]} seq {seq} threads {threads}: wall {wall*1e6:.1f} us; model_run p50 {sorted(model)[len(model)//2]:.1f} us; nodes sum {sum(agg.values())/runs:.1f} us")
for op, us in agg.most_common():
    print(f"   {op:40s} {us/runs:8.1f} us  ({cnt[op]//runs} nodes)")
os.remove(f)
