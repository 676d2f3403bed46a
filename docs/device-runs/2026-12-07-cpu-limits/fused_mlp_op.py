"""Whether this ONNX Runtime runs MatMulNBitsMlp (gate and up 4-bit products with SwiGLU in one node, a contrib op
its schema lists) on the CPU: a one-node graph, one session. fused_mlp_op.py"""
import numpy as np
import onnxruntime as ort
from onnx import TensorProto as TP
from onnx import helper

K, N, BLOCK = 192, 512, 32
rng = np.random.default_rng(0)


def weights(name: str) -> list:
    packed = rng.integers(0, 256, (N, K // BLOCK, BLOCK // 2), dtype=np.uint8)
    scales = rng.random(N * K // BLOCK, dtype=np.float32) * 0.01
    return [helper.make_tensor(name + "_B", TP.UINT8, packed.shape, packed.tobytes(), raw=True),
            helper.make_tensor(name + "_s", TP.FLOAT, scales.shape, scales)]


node = helper.make_node("MatMulNBitsMlp", ["A", "", "norm", "gate_B", "gate_s", "", "up_B", "up_s", ""], ["Y"],
                        domain="com.microsoft", K=K, N=N, bits=4, block_size=BLOCK, activation="silu",
                        accuracy_level=4)
graph = helper.make_graph([node], "mlp", [helper.make_tensor_value_info("A", TP.FLOAT, [1, "s", K])],
                          [helper.make_tensor_value_info("Y", TP.FLOAT, [1, "s", N])],
                          weights("gate") + weights("up") + [helper.make_tensor("norm", TP.FLOAT, (K,), np.ones(K))])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
model.ir_version = 10
print("onnxruntime", ort.__version__)
try:
    ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    print("MatMulNBitsMlp: the CPU runs it")
except Exception as error:  # the refusal is the finding
    print("MatMulNBitsMlp on the CPU:", str(error).splitlines()[0][:200])
