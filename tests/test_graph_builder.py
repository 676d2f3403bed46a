"""`CausalLM.graph_builder.GraphBuilder`'s contract for the Linear op's graphs (NNDF/backends/onnxrt/custom_ops.py,
its CPU build): a norm stays pending until a product takes it in (the op's `norm`, its output N named after the
norm) or another node reads it (the norm's own node first); a skip norm's residual add goes into the product
before it where that product is a Linear node nobody reads yet, else the skip norm's own node runs; a gated MLP is
one op; the attention is this project's op where the graph owns its attention and the op can take it. Each graph
runs on ONNX Runtime's CPU provider against numpy."""
import shutil

import numpy as np
import pytest
import torch

from CausalLM import fused_graph as fg
from NNDF.errors import ArtifactError
from NNDF.backends.onnxrt import custom_ops
from NNDF.backends.onnxrt.steps import make_session

E, F = 16, 24  # widths: a multiple of the op's 16-byte loads


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    return custom_ops.build(tmp_path_factory.mktemp("ops"))


def layer_norm(x, gamma, beta, eps=1e-5):
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def rms_norm(x, gamma, eps=1e-5):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * gamma


def run(g: fg.GraphBuilder, folder, library, outputs: list[str], **inputs) -> list[np.ndarray]:
    """The graph of `g` with float32 inputs [1, 2, width] and `outputs`, run on the CPU; also its node types."""
    for name, value in inputs.items():
        g.input(name, g.elem, list(value.shape))
    for name in outputs:
        g.output(name, g.elem, None)
    model = g.model("test")
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(library, folder / custom_ops.FILE)
    fg.save(model, folder / "model.onnx")
    session = make_session(folder / "model.onnx", torch.device("cpu"))
    return session.run(outputs, inputs), [node.op_type for node in model.graph.node]


def builder(folder, folds: bool = True) -> fg.GraphBuilder:
    return fg.GraphBuilder(np.float32, folder / "model.onnx.data", linear=True, norms_in_products=folds)


def test_a_norm_runs_inside_the_products_that_read_it_and_its_rows_serve_other_readers(tmp_path, library):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, E), dtype=np.float32) * 3 + 1
    gamma, beta = rng.standard_normal(E, dtype=np.float32), rng.standard_normal(E, dtype=np.float32)
    w1, w2 = rng.standard_normal((F, E), dtype=np.float32), rng.standard_normal((F, E), dtype=np.float32)
    g = builder(tmp_path)
    normed = fg.layer_norm(g, "x", g.weight("gamma", gamma), g.weight("beta", beta), 1e-5)
    g.matmul(normed, "w1", w1, outputs=["y1"])  # takes the norm in: its second output is `normed`
    g.matmul(normed, "w2", w2, outputs=["y2"])  # reads that output: no norm of its own
    g.op("Relu", [normed], ["r"])
    (y1, y2, r), ops = run(g, tmp_path, library, ["y1", "y2", "r"], x=x)
    expected = layer_norm(x, gamma, beta)
    assert ops.count("Linear") == 2 and "LayerNormalization" not in ops, ops
    np.testing.assert_allclose(y1, expected @ w1.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(y2, expected @ w2.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(r, np.maximum(expected, 0), rtol=1e-4, atol=1e-4)


def test_a_norm_read_first_by_another_node_gets_its_own_node(tmp_path, library):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 2, E), dtype=np.float32)
    gamma, w = rng.standard_normal(E, dtype=np.float32), rng.standard_normal((F, E), dtype=np.float32)
    g = builder(tmp_path)
    normed = fg.rms_norm(g, "x", g.weight("gamma", gamma), 1e-5)
    g.op("Relu", [normed], ["r"])  # the first reader: the norm's own node goes before it
    g.matmul(normed, "w", w, outputs=["y"])  # a plain product of the norm's output
    (r, y), ops = run(g, tmp_path, library, ["r", "y"], x=x)
    expected = rms_norm(x, gamma)
    assert ops == ["SimplifiedLayerNormalization", "Relu", "Linear"], ops
    np.testing.assert_allclose(r, np.maximum(expected, 0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(y, expected @ w.T, rtol=1e-4, atol=1e-4)


def test_a_pending_norm_that_is_a_graph_output_is_written(tmp_path, library):
    x = np.random.default_rng(2).standard_normal((1, 2, E), dtype=np.float32)
    g = builder(tmp_path)
    name = fg.rms_norm(g, "x", g.weight("gamma", np.ones(E, np.float32)), 1e-5)
    (n,), ops = run(g, tmp_path, library, [name], x=x)
    assert ops == ["SimplifiedLayerNormalization"]
    np.testing.assert_allclose(n, rms_norm(x, 1.0), rtol=1e-4, atol=1e-4)


def test_a_skip_norm_adds_the_residual_in_the_product_before_it(tmp_path, library):
    rng = np.random.default_rng(3)
    x, residual = (rng.standard_normal((1, 2, E), dtype=np.float32) for _ in range(2))
    w1, w2 = rng.standard_normal((E, E), dtype=np.float32), rng.standard_normal((F, E), dtype=np.float32)
    gamma, bias = rng.standard_normal(E, dtype=np.float32), rng.standard_normal(E, dtype=np.float32)
    g = builder(tmp_path)
    out = g.matmul("x", "w1", w1)
    normed, total = fg.skip_rms_norm(g, out, "res", g.weight("gamma", gamma), g.weight("bias", bias), 1e-5)
    g.matmul(normed, "w2", w2, outputs=["y"])
    g.op("Identity", [total], ["total"])
    (y, t), ops = run(g, tmp_path, library, ["y", "total"], x=x, res=residual)
    expected_total = x @ w1.T + bias + residual
    assert ops == ["Linear", "Linear", "Identity"], ops
    np.testing.assert_allclose(t, expected_total, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(y, rms_norm(expected_total, gamma) @ w2.T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", ["not a product", "read already", "no folds"])
def test_a_skip_norm_keeps_its_own_node_where_the_add_cannot_move(tmp_path, library, case):
    rng = np.random.default_rng(4)
    x, residual = (rng.standard_normal((1, 2, E), dtype=np.float32) for _ in range(2))
    w, gamma = rng.standard_normal((E, E), dtype=np.float32), rng.standard_normal(E, dtype=np.float32)
    g = builder(tmp_path, folds=case != "no folds")
    out = g.op("Relu", ["x"]) if case == "not a product" else g.matmul("x", "w", w)
    if case == "read already":
        g.op("Identity", [out], ["seen"])
    normed, total = fg.skip_rms_norm(g, out, "res", g.weight("gamma", gamma), None, 1e-5)
    g.op("Identity", [normed], ["n"])
    (n,), ops = run(g, tmp_path, library, ["n"], x=x, res=residual)
    assert "SkipSimplifiedLayerNormalization" in ops, ops
    before = np.maximum(x, 0) if case == "not a product" else x @ w.T
    np.testing.assert_allclose(n, rms_norm(before + residual, gamma), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("activation", ["silu", "gelu_tanh", "relu"])
def test_a_gated_mlp_is_one_op_where_the_op_has_its_activation(tmp_path, library, activation):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 2, E), dtype=np.float32)
    gate, up = rng.standard_normal((F, E), dtype=np.float32), rng.standard_normal((F, E), dtype=np.float32)
    g = builder(tmp_path)
    g.op("Identity", [fg.gated(g, "x", "wi", gate, up, activation)], ["y"])
    (y,), ops = run(g, tmp_path, library, ["y"], x=x)
    h = torch.from_numpy(x @ gate.T)
    act = {"silu": torch.nn.functional.silu, "relu": torch.relu,
           "gelu_tanh": lambda t: torch.nn.functional.gelu(t, approximate="tanh")}[activation](h).numpy()
    assert (ops == ["Linear", "Identity"]) == (activation != "relu"), ops  # ReLU: a product, Split, Relu and Mul
    np.testing.assert_allclose(y, act * (x @ up.T), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("linear, own, head_dim, rotary, expected", [
    (True, True, 16, False, "Attention"),
    (True, True, 16, True, "GroupQueryAttention"),  # the op rotates no keys
    (True, True, 264, False, "GroupQueryAttention"),  # past the CUDA kernel's head sizes
    (True, False, 16, False, "GroupQueryAttention"),  # not declared
    (False, True, 16, False, "GroupQueryAttention"),  # MatMul graphs load no library of ours
])
def test_the_attention_op_is_ours_where_the_graph_owns_its_attention(tmp_path, linear, own, head_dim, rotary,
                                                                      expected):
    g = fg.GraphBuilder(np.float32, linear=linear, own_attention=own)
    pasts = fg.decode_io(g, 1, 2, head_dim, 8)
    tables = ("cos", "sin") if rotary else None
    fg.attention(g, "qkv", pasts[0], ("present.0.key", "present.0.value"), 2, 0.5, rotary=tables)
    assert [n.op_type for n in g.nodes] == [expected]
    if expected == "Attention":  # no host scalar; a workspace output of its own
        assert "total_sequence_length" not in g.nodes[0].input and g.nodes[0].output[3].endswith(".workspace")
    else:
        with pytest.raises(ArtifactError, match="a position bias in the attention needs this project's Attention op"):
            fg.attention(g, "qkv", pasts[0], ("present.0.key", "present.0.value"), 2, 0.5, rotary=tables, bias="t")
