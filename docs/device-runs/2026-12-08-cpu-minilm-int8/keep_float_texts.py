import json, sys, numpy as np, onnx, onnxruntime as ort
from transformers import AutoTokenizer
from NNDF.backends.onnxrt.quantize import Int8, prepare
base = "temp/BERT/all-MiniLM-L6-v2/"
src = base + "encoder-feature-extraction-fp32-ortopt/encoder.onnx"
tok = AutoTokenizer.from_pretrained(base + "hf-model")
texts = [json.loads(l)["text"] for l in open("data/encoder_offline.jsonl")]
so = ort.SessionOptions(); so.intra_op_num_threads = 2
sf = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
feeds = []
for t in texts:
    enc = tok([t], return_tensors="np")
    feeds.append({k: enc[k].astype(np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")})
ref = [sf.run(None, f)[0][0].astype(np.float64) for f in feeds]
fp = onnx.load(src)
names = [n.name for n in fp.graph.node if n.op_type in ("Attention", "MatMul")]
print(names)
def score(keep, attn=True):
    m = Int8(attn).apply(prepare(onnx.load(src), frozenset(keep)) if False else onnx.load(src), frozenset(keep))
    onnx.save(m, "/tmp/qa/v.onnx")
    s = ort.InferenceSession("/tmp/qa/v.onnx", so, providers=["CPUExecutionProvider"])
    c = np.array([a @ b / np.linalg.norm(a) / np.linalg.norm(b) for a, b in ((r, s.run(None, f)[0][0].astype(np.float64)) for r, f in zip(ref, feeds))])
    return c.mean(), c.min()
for spec in sys.argv[1:]:
    keep = [x for x in spec.split(",") if x and x != "-"]
    print(spec, score(keep))
