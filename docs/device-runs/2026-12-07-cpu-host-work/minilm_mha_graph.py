"""The optimized MiniLM graph with each Attention op replaced by its q/k/v MatMul, a Split and MultiHeadAttention
without a mask (ONNX Runtime's CPU flash attention): minilm_mha_graph.py IN.onnx OUT.onnx."""
import onnx, sys
from onnx import helper, numpy_helper
src, dst = sys.argv[1], sys.argv[2]
m = onnx.load(src)
g = m.graph
inits = {i.name: i for i in g.initializer}
new_nodes = []
for n in g.node:
    if n.op_type != "Attention":
        new_nodes.append(n); continue
    x, w, b = n.input[0], n.input[1], n.input[2]
    heads = [a.i for a in n.attribute if a.name == "num_heads"][0]
    qkv = n.name + "_qkv"
    new_nodes.append(helper.make_node("MatMul", [x, w], [qkv], name=n.name + "_mm"))
    q, k, v = (n.name + s for s in ("_q", "_k", "_v"))
    hidden = numpy_helper.to_array(inits[w]).shape[1] // 3
    sp = n.name + "_split"
    g.initializer.append(numpy_helper.from_array(__import__("numpy").array([hidden] * 3, dtype="int64"), sp))
    new_nodes.append(helper.make_node("Split", [qkv, sp], [q, k, v], axis=2, name=n.name + "_sp"))
    new_nodes.append(helper.make_node("MultiHeadAttention", [q, k, v, b], [n.output[0]], domain="com.microsoft",
                                      num_heads=heads, name=n.name + "_mha"))
del g.node[:]
g.node.extend(new_nodes)
onnx.save(m, dst)
