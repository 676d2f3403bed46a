"""An encoder graph at B x S: median forward, and with `prof` ONNX Runtime's profile by op type:
encoder_profile.py GRAPH B S RUNS [prof] [DISABLED_OPTIMIZERS]."""
import sys, json, numpy as np, onnxruntime as ort, collections, os, time
path = sys.argv[1]; B, S = int(sys.argv[2]), int(sys.argv[3]); n = int(sys.argv[4]); prof = len(sys.argv) > 5 and sys.argv[5] == "prof"
unfused = sys.argv[6].split(",") if len(sys.argv) > 6 and sys.argv[6] else []
o = ort.SessionOptions(); o.intra_op_num_threads = 2; o.log_severity_level = 3; o.enable_profiling = prof
o.profile_file_prefix = "encoder_profile"
s = ort.InferenceSession(path, o, providers=["CPUExecutionProvider"], disabled_optimizers=unfused)
rng = np.random.default_rng(0)
feeds = {"input_ids": rng.integers(1000, 30000, (B, S)).astype(np.int64), "attention_mask": np.ones((B, S), np.int64),
         "token_type_ids": np.zeros((B, S), np.int64)}
feeds = {i.name: feeds[i.name] for i in s.get_inputs()}
for _ in range(3): s.run(None, feeds)
ts = []
for _ in range(n):
    t = time.perf_counter(); s.run(None, feeds); ts.append(time.perf_counter() - t)
print(f"{path}: {B}x{S} median {sorted(ts)[n//2]*1e3:.2f} ms")
if prof:
    f = s.end_profiling(); ev = json.load(open(f))
    agg = collections.Counter(); cnt = collections.Counter(); runs = sum(1 for e in ev if e.get("name") == "model_run")
    for e in ev:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            agg[e["args"]["op_name"]] += e["dur"]; cnt[e["args"]["op_name"]] += 1
    print(f"  nodes sum {sum(agg.values())/runs/1e3:.2f} ms per run")
    for op, us in agg.most_common(12): print(f"   {op:30s} {us/runs/1e3:7.2f} ms ({cnt[op]//runs})")
    os.remove(f)
