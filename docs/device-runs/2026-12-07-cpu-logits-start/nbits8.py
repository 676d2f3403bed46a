import sys, numpy as np, onnxruntime as ort, time, statistics, onnx, os
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))  # the repository root
from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer
from NNDF.backends.onnxrt.quantize import row_gathers, prepare
base = sys.argv[1]
src = base + "/decoder-fp32-fused/model.onnx"
scratch = __import__("tempfile").mkdtemp()
variants = {}
for bits, block, sym, acc in eval(sys.argv[2]):
    m = onnx.load(src)
    q = MatMulNBitsQuantizer(prepare(m, frozenset()), algo_config=DefaultWeightOnlyQuantConfig(block_size=block, is_symmetric=sym, accuracy_level=acc, bits=bits))
    q.process()
    out = f"{scratch}/{bits}-{block}-{sym}-{acc}.onnx"
    onnx.save(row_gathers(q.model.model), out, save_as_external_data=True, location=os.path.basename(out) + ".data")
    variants[(bits, block, sym, acc)] = out
variants["int8dyn"] = base + "/decoder-fp32-fused-int8/model.onnx"
variants["int4"] = base + "/decoder-fp32-fused-int4-b128-asym/model.onnx"
variants["fp32"] = src
def sess(p):
    so = ort.SessionOptions(); so.intra_op_num_threads = 2
    return ort.InferenceSession(p, so, providers=["CPUExecutionProvider"])
def binding(s, seq, L=96, filled=40):
    io = s.io_binding(); keep = []
    f = {"input_ids": np.random.randint(0, 1000, (1, seq)).astype(np.int64),
         "position_ids": (np.arange(seq)[None] + (filled if seq == 1 else 0)).astype(np.int64),
         "seqlens_k": np.array([filled if seq == 1 else seq-1], np.int32),
         "total_sequence_length": np.array(L if seq == 1 else seq, np.int32), "logits_start": np.array([-1], np.int64)}
    for k, v in f.items(): io.bind_cpu_input(k, v); keep.append(v)
    for i in s.get_inputs():
        if i.name.startswith("past."):
            a = np.zeros((1, i.shape[1], L, i.shape[3]), np.float32); keep.append(a)
            io.bind_cpu_input(i.name, a); io.bind_output(i.name.replace("past", "present"), "cpu", 0, np.float32, a.shape, a.ctypes.data)
    V = s.get_outputs()[0].shape[-1]; lg = np.zeros((1, 1, V), np.float32); keep.append(lg)
    io.bind_output("logits", "cpu", 0, np.float32, lg.shape, lg.ctypes.data)
    return io, keep
S = {k: sess(p) for k, p in variants.items()}
B = {k: {seq: binding(s, seq) for seq in (1, 32)} for k, s in S.items()}
res = {k: {1: [], 32: []} for k in S}
for rnd in range(int(sys.argv[3])):
    for k, s in S.items():
        for seq, n in ((1, int(sys.argv[4])), (32, max(int(sys.argv[4]) // 7, 3))):
            io = B[k][seq][0]; time.sleep(0.05)
            for _ in range(10): s.run_with_iobinding(io)
            t = time.perf_counter()
            for _ in range(n): s.run_with_iobinding(io)
            res[k][seq].append((time.perf_counter() - t) / n * 1e3)
for k in S:
    print(k, "step %.3f  prompt32 %.3f" % (statistics.median(res[k][1]), statistics.median(res[k][32])))
