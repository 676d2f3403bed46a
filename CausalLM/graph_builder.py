"""The graph under construction for onnxrt's graphs built from the weights: `GraphBuilder` (nodes, weights written
to an external data file as they come, inputs, outputs), its products stated once for ONNX Runtime's MatMul or
this project's Linear op (NNDF/backends/onnxrt/custom_ops.py), and the Linear op's norms still pending
(`PendingNorm`). The families' shared pieces that use it are in `CausalLM.fused_graph`."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from NNDF.backends.onnxrt import custom_ops

MS = "com.microsoft"
OPSET = 17  # LayerNormalization
IR_VERSION = 10  # onnx writes its newest IR version by default; ONNX Runtime 1.31 reads up to 13
ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16}
LAYER_NORM, RMS_NORM = 1, 2  # the Linear op's `norm` attribute
GATED = {"silu": 2, "gelu_tanh": 3}  # the Linear op's gated activations (its `activation` attribute)


@dataclass(frozen=True)
class PendingNorm:
    """A norm not written into the graph yet: LayerNorm(x) * gamma + beta (LAYER_NORM) or RMSNorm(x) * gamma."""

    kind: int
    x: str
    gamma: str
    beta: str | None
    eps: float


class GraphBuilder:
    """Nodes, weights (initializers in the graph's float type), inputs and outputs of one graph. With `data` (a file
    path), each weight is written there as it is added and the graph refers to it as external data, so the builder
    never holds more than one weight (graphs over 2 GB need external data anyway); the graph is then saved in the
    same folder (`save`). With `linear`, the checkpoint's products (`matmul`) are this project's Linear op
    (NNDF/backends/onnxrt/custom_ops.py: on CUDA its one-token kernel reads the weights faster than cuBLAS), whose
    library must then sit beside the graph; without, ONNX Runtime's MatMul. A Linear-op graph with `norms_in_products`
    also runs its norms inside the products that read them: `norm` returns the name of a norm still pending; the
    first product of it computes the norm in its kernel and writes the normalised rows under that name, any other
    node that reads the name first gets the norm's own node. A Linear-op graph with `own_attention` runs its
    attention without rotary as this project's Attention op too (`fused_graph.attention`)."""

    ALIGN = 4096  # each weight's offset in the data file: page-aligned for memory-mapped reads

    def __init__(self, dtype, data=None, linear: bool = False, norms_in_products: bool = False,
                 own_attention: bool = False):
        self.linear = linear
        self.fold_norms = linear and norms_in_products
        self.own_attention = linear and own_attention
        self.dtype = np.dtype(dtype)
        self.elem = ELEM[self.dtype]
        self.nodes: list = []
        self.weights: list = []
        self.inputs: list = []
        self.outputs: list = []
        self._count = 0
        self._pending: dict[str, PendingNorm] = {}
        self._norms = 0  # norms made, for their output names
        self._widths: dict[str, int] = {}  # a 1-D weight's length, by name
        self.data_name = None if data is None else data.name
        self._data = None if data is None else open(data, "wb")

    def weight(self, name: str, array: np.ndarray, dtype=None) -> str:
        array = _contiguous(array, np.dtype(dtype or self.dtype))
        if array.ndim == 1:
            self._widths[name] = array.shape[0]
        if self._data is None:
            self.weights.append(numpy_helper.from_array(array, name))
            return name
        offset = -self._data.tell() % self.ALIGN + self._data.tell()
        self._data.seek(offset)
        self._data.write(memoryview(array).cast("B"))
        tensor = TensorProto(name=name, data_type=helper.np_dtype_to_tensor_dtype(array.dtype), dims=array.shape)
        tensor.data_location = TensorProto.EXTERNAL
        for key, value in (("location", self.data_name), ("offset", offset), ("length", array.nbytes)):
            tensor.external_data.add(key=key, value=str(value))
        self.weights.append(tensor)
        return name

    def input(self, name: str, elem: int, shape: list) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem, shape))
        return name

    def input_shape(self, name: str) -> list:
        """The declared shape of graph input `name` (ints and dimension names)."""
        info = next(i for i in self.inputs if i.name == name)
        return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in info.type.tensor_type.shape.dim]

    def output(self, name: str, elem: int, shape: list) -> str:
        self.outputs.append(helper.make_tensor_value_info(name, elem, shape))
        return name

    def op(self, op_type: str, inputs: list[str], outputs: int | list[str] = 1, domain: str = "", **attrs):
        """Add a node; returns its output name (one output) or names. An output named "" is left out."""
        for name in inputs:
            self._write_norm(name)
        self._count += 1
        names = outputs if isinstance(outputs, list) else [f"{op_type}_{self._count}_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, names, name=f"{op_type}_{self._count}", domain=domain,
                                           **attrs))
        return names[0] if len(names) == 1 else names

    def stored(self, name: str, weight: np.ndarray) -> str:
        """A checkpoint's nn.Linear weight [out, in] as the initializer `name` in the layout this builder's
        products read: as it is for the Linear op (`linear`), transposed ([in, out]) for MatMul."""
        return self.weight(name, weight if self.linear else weight.T)

    def apply(self, x: str, weight: str, bias: str | None = None, relu: bool = False, alpha: float = 1.0,
              outputs: int | list[str] = 1, addend: str | None = None, gate: str | None = None) -> str:
        """alpha * x @ W^T (+ bias) (+ addend, a tensor of the output's shape), then ReLU, for a weight `stored`
        under the name `weight`: the Linear op (one node) with `linear`, else MatMul (FusedMatMul where alpha is
        not 1), an Add each and a Relu. `gate` (a Linear-op graph only; GATED): W's rows are gate and up pairs and
        the op returns act(gate) * up."""
        if not self.linear:
            assert gate is None, "a gated product is the Linear op's"
            nodes = [("FusedMatMul", [weight], dict(domain=MS, alpha=alpha)) if alpha != 1.0 else ("MatMul", [weight], {})]
            nodes += [("Add", [term], {}) for term in (bias, addend) if term] + ([("Relu", [], {})] if relu else [])
            y = x
            for i, (op_type, more, attrs) in enumerate(nodes):  # the last node's output carries `outputs`' name
                y = self.op(op_type, [y, *more], outputs if i == len(nodes) - 1 else 1, **attrs)
            return y
        attrs = {**({"alpha": float(alpha)} if alpha != 1.0 else {}),
                 **({"activation": GATED[gate] if gate else 1} if relu or gate else {})}
        y = outputs[0] if isinstance(outputs, list) else f"Linear_{self._count + 1}_0"
        norm = self._pending.pop(x, None)  # the norm in this product's kernel, its output written under x's name
        inputs = [norm.x if norm else x, weight, bias or "", addend or ""]
        names = [y, x if norm else ""] + ([f"{y}_product"] if gate else [])
        if norm:
            inputs += [norm.gamma] + ([norm.beta] if norm.beta else [])
            attrs.update(norm=norm.kind, epsilon=float(norm.eps))
        while not inputs[-1]:
            inputs.pop()
        while not names[-1]:
            names.pop()
        got = self.op("Linear", inputs, names, domain=custom_ops.DOMAIN, **attrs)
        return got if isinstance(got, str) else got[0]

    def matmul(self, x: str, name: str, weight: np.ndarray, bias: str | None = None, relu: bool = False,
               alpha: float = 1.0, outputs: int | list[str] = 1, addend: str | None = None) -> str:
        """`apply` of the checkpoint's nn.Linear weight [out, in], `stored` as `name`."""
        return self.apply(x, self.stored(name, weight), bias, relu, alpha, outputs, addend)

    def norm(self, kind: int, x: str, gamma: str, beta: str | None, eps: float) -> str:
        """LayerNorm(x) * gamma + beta (LAYER_NORM) or RMSNorm(x) * gamma (RMS_NORM; beta None) over the last axis:
        pending (for the products that read it) in a Linear-op graph with `norms_in_products`, where the width is a
        multiple of the op's 16-byte loads; else its node, now."""
        self._norms += 1
        name = f"normed{self._norms}"
        self._pending[name] = PendingNorm(kind, x, gamma, beta, eps)
        if not (self.fold_norms and self._widths.get(gamma, 1) % 8 == 0):
            self._write_norm(name)
        return name

    def _write_norm(self, name: str) -> None:
        """The node of the pending norm `name` (if it is one), whose output takes that name."""
        norm = self._pending.pop(name, None)
        if norm is None:
            return
        if norm.kind == LAYER_NORM:
            self.op("LayerNormalization", [norm.x, norm.gamma, norm.beta], [name], axis=-1, epsilon=norm.eps)
        else:
            self.op("SimplifiedLayerNormalization", [norm.x, norm.gamma], [name], axis=-1, epsilon=norm.eps)

    def positions_from(self, x: str, start: str) -> str:
        """x [B, S, ...] from position `start` on (an int64 [1] tensor, a graph input: negative counts from the end);
        a pending norm of x stays pending, over the kept positions of the tensor it normalises."""
        norm = self._pending.pop(x, None)
        self._count += 1
        ends = self.weight(f"slice{self._count}.ends", np.array([np.iinfo(np.int64).max]), np.int64)
        axes = self.weight(f"slice{self._count}.axes", np.array([1]), np.int64)
        kept = self.op("Slice", [norm.x if norm else x, start, ends, axes])
        return self.norm(norm.kind, kept, norm.gamma, norm.beta, norm.eps) if norm else kept

    def add_into_product(self, x: str, residual: str, bias: str | None = None) -> bool:
        """In a Linear-op graph with `norms_in_products`, make the Linear node that just wrote `x` (read by no node
        yet, without an addend) add `residual` (and `bias`) to it, so `x` becomes the residual sum; False (and no
        change) where that cannot be done."""
        if not self.fold_norms or residual in self._pending:
            return False
        node = next((n for n in reversed(self.nodes) if x in n.output), None)
        if node is None or node.op_type != "Linear" or node.domain != custom_ops.DOMAIN or node.output[0] != x:
            return False
        inputs = list(node.input) + [""] * (4 - len(node.input))
        if inputs[3] or (bias and inputs[2]) or any(x in n.input for n in self.nodes):
            return False
        inputs[2], inputs[3] = inputs[2] or bias or "", residual
        del node.input[:]
        node.input.extend(inputs)
        return True

    def model(self, name: str) -> onnx.ModelProto:
        for output in self.outputs:
            self._write_norm(output.name)
        if self._data is not None:
            self._data.close()
        graph = helper.make_graph(self.nodes, name, self.inputs, self.outputs, self.weights)
        domains = [helper.make_opsetid("", OPSET), helper.make_opsetid(MS, 1)]
        if any(node.domain == custom_ops.DOMAIN for node in self.nodes):
            domains.append(helper.make_opsetid(custom_ops.DOMAIN, 1))
        return helper.make_model(graph, opset_imports=domains, producer_name="fused-decode", ir_version=IR_VERSION)

    def close(self) -> None:
        """Close the data file (a build that failed half way)."""
        if self._data is not None:
            self._data.close()


def _contiguous(array: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """`array` cast to `dtype`, its rows in order: a transposed [in, out] view of a checkpoint's [out, in] weight is
    cast first, then copied by torch's threaded copy (numpy's strided single-threaded one took most of an 8B build)."""
    import torch

    array = np.asarray(array)
    floats = {np.dtype(np.float16): torch.float16, np.dtype(np.float32): torch.float32}
    if array.flags.c_contiguous or array.ndim < 2 or dtype not in floats or min(array.strides) < 0:
        return np.ascontiguousarray(array, dtype=dtype)
    return torch.from_numpy(array).to(floats[dtype]).contiguous().numpy()
