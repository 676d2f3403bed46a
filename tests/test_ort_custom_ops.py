"""This project's ONNX Runtime custom ops (NNDF/backends/onnxrt/custom_ops.py, sources in ops/): `nndf.Linear`
(X . W^T + B, W stored [out, in]) against numpy / torch, on ONNX Runtime's CPU provider (the library's CPU
build, compiled here with the C++ compiler) and, with HARNESS_TEST_DEVICE=cuda, onnxruntime-gpu and nvcc, on
CUDA: the few-row kernel at 1-2 rows, the tensor-core kernel at 3-16 float16 rows (with and without a bias, widths
that are and are not a multiple of its loads and of its tiles), cuBLAS past 16 rows, for float32 past 2 and for
widths its 16-byte loads cannot take, and replays of ONNX Runtime's CUDA graph."""
import os
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from NNDF.backends.onnxrt import custom_ops
from NNDF.backends.onnxrt.steps import make_session
from NNDF.errors import BackendUnavailable

DEVICE = os.environ.get("HARNESS_TEST_DEVICE", "cpu")
ELEM = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}


def write_graph(folder: Path, library: Path, name: str, nodes: list, inputs: list, outputs: list,
                inits: list = ()) -> Path:
    """The graph of `nodes` (this library's domain imported) as folder/<name>.onnx, the library copied beside it,
    where make_session finds it."""
    graph = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17),
                                                                   helper.make_opsetid(custom_ops.DOMAIN, 1)])
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(library, folder / custom_ops.FILE)
    onnx.save(model, str(folder / f"{name}.onnx"))
    return folder / f"{name}.onnx"


def saved_graph(folder: Path, node, inits: list, elem: int, library: Path, outputs=("y",)) -> Path:
    """One Linear `node` over x [batch, seq, k] (k symbolic, so a wrong width reaches the op) as folder/linear.onnx."""
    x = helper.make_tensor_value_info("x", elem, ["batch", "seq", "k"])
    return write_graph(folder, library, "linear", [node], [x],
                       [helper.make_tensor_value_info(name, elem, None) for name in outputs], inits)


def linear_graph(folder: Path, w: np.ndarray, b: np.ndarray | None, library: Path, **attrs) -> Path:
    """y = Linear(x, w, b)."""
    inits = [numpy_helper.from_array(w, "w")] + ([numpy_helper.from_array(b, "b")] if b is not None else [])
    node = helper.make_node("Linear", ["x", "w"] + (["b"] if b is not None else []), ["y"], domain=custom_ops.DOMAIN,
                            **attrs)
    return saved_graph(folder, node, inits, ELEM[w.dtype.type], library)


@pytest.fixture(scope="module")
def cpu_library(tmp_path_factory) -> Path:
    return custom_ops.build(tmp_path_factory.mktemp("ops-cpu"))


@pytest.mark.parametrize("bias", [True, False])
def test_linear_on_the_cpu_is_x_times_w_transposed(cpu_library, tmp_path, bias):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((48, 64), dtype=np.float32)
    b = rng.standard_normal(48, dtype=np.float32) if bias else None
    session = make_session(linear_graph(tmp_path, w, b, cpu_library), torch.device("cpu"))
    for shape in [(1, 1, 64), (2, 3, 64), (1, 0, 64)]:
        x = rng.standard_normal(shape, dtype=np.float32)
        (y,) = session.run(None, {"x": x})
        expected = x @ w.T + (b if bias else 0)
        assert y.shape == shape[:2] + (48,)
        np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("alpha, relu", [(0.25, False), (1.0, True), (2.0, True)])
def test_linear_scales_and_rectifies_on_the_cpu(cpu_library, tmp_path, alpha, relu):
    rng = np.random.default_rng(1)
    w, b = rng.standard_normal((40, 24), dtype=np.float32), rng.standard_normal(40, dtype=np.float32)
    attrs = {"alpha": alpha, **({"activation": 1} if relu else {})}
    session = make_session(linear_graph(tmp_path, w, b, cpu_library, **attrs), torch.device("cpu"))
    x = rng.standard_normal((1, 5, 24), dtype=np.float32)
    (y,) = session.run(None, {"x": x})
    expected = alpha * (x @ w.T) + b
    np.testing.assert_allclose(y, np.maximum(expected, 0) if relu else expected, rtol=1e-5, atol=1e-5)
    assert (y < 0).any() != relu


def test_linear_adds_a_tensor_of_the_outputs_shape(cpu_library, tmp_path):
    """The fourth input (A [..., n]) is added after the bias, before ReLU; a wrong shape is refused by message."""
    rng = np.random.default_rng(2)
    w, b = rng.standard_normal((12, 8), dtype=np.float32), rng.standard_normal(12, dtype=np.float32)
    node = helper.make_node("Linear", ["x", "w", "b", "a"], ["y"], domain=custom_ops.DOMAIN, activation=1)
    graph = helper.make_graph([node], "linear", [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", "seq", d])
                                                 for n, d in (("x", "k"), ("a", "n"))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17),
                                                                   helper.make_opsetid(custom_ops.DOMAIN, 1)])
    shutil.copy(cpu_library, tmp_path / custom_ops.FILE)
    onnx.save(model, str(tmp_path / "linear.onnx"))
    session = make_session(tmp_path / "linear.onnx", torch.device("cpu"))
    x, a = rng.standard_normal((2, 3, 8), dtype=np.float32), rng.standard_normal((2, 3, 12), dtype=np.float32)
    (y,) = session.run(None, {"x": x, "a": a})
    np.testing.assert_allclose(y, np.maximum(x @ w.T + b + a, 0), rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception, match="the addend A must have the output's shape"):
        session.run(None, {"x": x, "a": a[:, :1]})


def test_linear_refuses_an_input_of_another_width(cpu_library, tmp_path):
    w = np.ones((8, 16), dtype=np.float32)
    session = make_session(linear_graph(tmp_path, w, None, cpu_library), torch.device("cpu"))
    with pytest.raises(Exception, match=r"nndf Linear: X \[\.\.\., 17\], W \[8, 16\] .* do not fit"):
        session.run(None, {"x": np.ones((1, 1, 17), dtype=np.float32)})


def test_the_library_is_rebuilt_only_when_its_sources_change(cpu_library, tmp_path):
    first = custom_ops.build(tmp_path)
    stamp = first.stat().st_mtime_ns
    assert custom_ops.build(tmp_path).stat().st_mtime_ns == stamp
    (tmp_path / (custom_ops.FILE + ".sources")).write_text("another digest\n")
    assert custom_ops.build(tmp_path).stat().st_mtime_ns != stamp


def test_a_compiled_library_is_copied_from_the_cache_not_compiled_again(tmp_path, monkeypatch):
    monkeypatch.setenv("NNDF_OPS_CACHE", str(tmp_path / "cache"))
    first = custom_ops.build(tmp_path / "a")
    cached = tmp_path / "cache" / custom_ops.sources_digest(None) / custom_ops.FILE
    assert cached.read_bytes() == first.read_bytes()
    monkeypatch.setenv("PATH", str(tmp_path / "no-compilers"))  # a second compile would fail
    monkeypatch.setenv("CXX", str(tmp_path / "no-compilers" / "c++"))
    assert custom_ops.build(tmp_path / "b").read_bytes() == first.read_bytes()


def test_a_cuda_build_without_nvcc_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(custom_ops, "DEFAULT_CUDA_HOME", str(tmp_path))
    monkeypatch.setenv("NNDF_OPS_CACHE", str(tmp_path / "cache"))  # no library compiled before
    with pytest.raises(BackendUnavailable, match="compiled with nvcc, which is not on PATH"):
        custom_ops.build(tmp_path / "ops", (9, 0))
    assert not (tmp_path / "ops" / custom_ops.FILE).exists()


def _cuda_library(tmp_path_factory) -> Path:
    if DEVICE != "cuda":
        pytest.skip("runs with HARNESS_TEST_DEVICE=cuda")
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("needs onnxruntime-gpu")
    return custom_ops.build(tmp_path_factory.mktemp("ops-cuda"), torch.cuda.get_device_capability(0))


@pytest.fixture(scope="module")
def cuda_library(tmp_path_factory) -> Path:
    return _cuda_library(tmp_path_factory)


def _run_cuda(session, x: torch.Tensor, n: int) -> torch.Tensor:
    y = torch.empty(*x.shape[:-1], n, dtype=x.dtype, device="cuda")
    binding = session.io_binding()
    elem = np.float16 if x.dtype == torch.float16 else np.float32
    binding.bind_input("x", "cuda", 0, elem, tuple(x.shape), x.data_ptr())
    binding.bind_output("y", "cuda", 0, elem, tuple(y.shape), y.data_ptr())
    session.run_with_iobinding(binding)
    torch.cuda.synchronize()
    return y


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("k", [4096, 2056, 20])
@pytest.mark.parametrize("bias, alpha, relu", [(True, 1.0, False), (False, 1.0, False), (True, 0.5, True)])
def test_linear_on_cuda_matches_torch(cuda_library, tmp_path, dtype, k, bias, alpha, relu):
    """Without an addend (the CPU tests check the addend input; BLOOM's CUDA graph tests use it)."""
    n = 1000
    gen = torch.Generator().manual_seed(k)
    w = (torch.randn(n, k, generator=gen) * k ** -0.5).numpy().astype(dtype)
    b = torch.randn(n, generator=gen).numpy().astype(dtype) if bias else None
    stream = torch.cuda.Stream()
    attrs = {"alpha": alpha, **({"activation": 1} if relu else {})}
    session = make_session(linear_graph(tmp_path, w, b, cuda_library, **attrs), torch.device("cuda", 0), stream=stream)
    wt, bt = torch.from_numpy(w).cuda().float(), (torch.from_numpy(b).cuda().float() if bias else 0)
    tol = 2e-3 if dtype == np.float16 else 1e-4
    with torch.cuda.stream(stream):
        for rows in [1, 2, 3, 5, 8, 9, 16, 17, 130]:
            x = torch.randn(1, rows, k, generator=gen).to("cuda", torch.float16 if dtype == np.float16 else torch.float32)
            y = _run_cuda(session, x, n)
            expected = alpha * (x.float() @ wt.T) + bt
            expected = expected.relu() if relu else expected
            torch.testing.assert_close(y.float(), expected, rtol=tol, atol=tol, msg=f"{rows} rows")


@pytest.mark.parametrize("warps", ["", "4", "8", "16"])
def test_linear_on_cuda_matches_torch_at_model_shapes(cuda_library, tmp_path, monkeypatch, warps):
    """A decoder's products with a bias (BLIP-large's text decoder: 768 wide, 3072 inner, a 30524-token head whose
    last block of 16 weight rows is partly past the end) at the rows of a two-row two-token pass, beams and batches,
    with the tensor-core kernel's warps as chosen ("") and forced (NNDF_ORT_LINEAR_DOT_WARPS, read at launch)."""
    if warps:
        monkeypatch.setenv("NNDF_ORT_LINEAR_DOT_WARPS", warps)
    gen = torch.Generator().manual_seed(7)
    for n, k in [(30524, 768), (2304, 768), (3072, 768), (768, 3072), (768, 768)]:
        w = (torch.randn(n, k, generator=gen) * k ** -0.5).half()
        b = torch.randn(n, generator=gen).half()
        stream = torch.cuda.Stream()
        # a folder per graph: the library beside each is copied in, never over one a live session has loaded
        graph = linear_graph(tmp_path / f"{n}x{k}", w.numpy(), b.numpy(), cuda_library)
        session = make_session(graph, torch.device("cuda", 0), stream=stream)
        wt, bt = w.cuda().float(), b.cuda().float()
        with torch.cuda.stream(stream):
            for rows in (2, 3, 4, 8, 16):
                x = torch.randn(1, rows, k, generator=gen).to("cuda", torch.float16)
                y = _run_cuda(session, x, n)
                torch.testing.assert_close(y.float(), x.float() @ wt.T + bt, rtol=4e-3, atol=4e-3,
                                           msg=f"{n} x {k}, {rows} rows")


def test_linear_replays_from_a_cuda_graph(cuda_library, tmp_path):
    k, n = 4096, 512
    w = (np.random.default_rng(0).standard_normal((n, k)) * k ** -0.5).astype(np.float16)
    stream = torch.cuda.Stream()
    session = make_session(linear_graph(tmp_path, w, None, cuda_library), torch.device("cuda", 0), stream=stream,
                           cuda_graph=True)
    x = torch.empty(1, 1, k, dtype=torch.float16, device="cuda")
    y = torch.empty(1, 1, n, dtype=torch.float16, device="cuda")
    binding = session.io_binding()
    binding.bind_input("x", "cuda", 0, np.float16, tuple(x.shape), x.data_ptr())
    binding.bind_output("y", "cuda", 0, np.float16, tuple(y.shape), y.data_ptr())
    wt = torch.from_numpy(w).cuda().float()
    with torch.cuda.stream(stream):
        for i in range(4):  # the first runs capture, later ones replay with new inputs in the same buffers
            x.copy_(torch.randn(1, 1, k, device="cuda"))
            session.run_with_iobinding(binding)
            torch.cuda.synchronize()
            torch.testing.assert_close(y.float(), x.float() @ wt.T, rtol=2e-3, atol=2e-3, msg=f"run {i}")


def test_linear_on_cuda_adds_a_tensor_of_the_outputs_shape(cuda_library, tmp_path):
    k, n = 1024, 520
    gen = torch.Generator().manual_seed(3)
    w = (torch.randn(n, k, generator=gen) * k ** -0.5).half()
    b = torch.randn(n, generator=gen).half()
    node = helper.make_node("Linear", ["x", "w", "b", "a"], ["y"], domain=custom_ops.DOMAIN)
    graph = helper.make_graph([node], "linear", [helper.make_tensor_value_info(name, TensorProto.FLOAT16, ["b", "s", d])
                                                 for name, d in (("x", k), ("a", n))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, None)],
                              [numpy_helper.from_array(w.numpy(), "w"), numpy_helper.from_array(b.numpy(), "b")])
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17),
                                                                   helper.make_opsetid(custom_ops.DOMAIN, 1)])
    shutil.copy(cuda_library, tmp_path / custom_ops.FILE)
    onnx.save(model, str(tmp_path / "linear.onnx"))
    stream = torch.cuda.Stream()
    session = make_session(tmp_path / "linear.onnx", torch.device("cuda", 0), stream=stream)
    with torch.cuda.stream(stream):
        for rows in (1, 2, 3, 9, 17):  # the few-row kernel, the tensor-core kernel, cuBLAS and the epilogue kernel
            x = torch.randn(1, rows, k, device="cuda", dtype=torch.float16)
            a = torch.randn(1, rows, n, device="cuda", dtype=torch.float16)
            y = torch.empty(1, rows, n, device="cuda", dtype=torch.float16)
            binding = session.io_binding()
            for name, t in (("x", x), ("a", a)):
                binding.bind_input(name, "cuda", 0, np.float16, tuple(t.shape), t.data_ptr())
            binding.bind_output("y", "cuda", 0, np.float16, tuple(y.shape), y.data_ptr())
            session.run_with_iobinding(binding)
            torch.cuda.synchronize()
            expected = x.float() @ w.cuda().float().T + b.cuda().float() + a.float()
            torch.testing.assert_close(y.float(), expected, rtol=2e-3, atol=2e-3, msg=f"{rows} rows")


def norm_graph(folder: Path, w: np.ndarray, gamma: np.ndarray, beta: np.ndarray | None, library: Path,
               norm: int, eps: float) -> Path:
    """(y, n) = Linear(x, w, norm=..., G=gamma, H=beta): the product of x's rows normalised, and those rows."""
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(gamma, "g")]
    inits += [numpy_helper.from_array(beta, "h")] if beta is not None else []
    node = helper.make_node("Linear", ["x", "w", "", "", "g"] + (["h"] if beta is not None else []), ["y", "n"],
                            domain=custom_ops.DOMAIN, norm=norm, epsilon=eps)
    return saved_graph(folder, node, inits, ELEM[w.dtype.type], library, ("y", "n"))


def normed(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor | None, norm: int, eps: float) -> torch.Tensor:
    """torch's LayerNorm (norm=1) or RMSNorm (norm=2) over the last axis, in fp32."""
    x = x.float()
    if norm == 1:
        return torch.nn.functional.layer_norm(x, x.shape[-1:], gamma.float(), None if beta is None else beta.float(),
                                              eps)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gamma.float()


@pytest.mark.parametrize("norm, with_beta", [(1, True), (1, False), (2, False)])
def test_linear_normalises_its_input_first_on_the_cpu(cpu_library, tmp_path, norm, with_beta):
    """Y = N . W^T and N = the norm of X (second output), against torch's layer_norm / an RMSNorm."""
    rng = np.random.default_rng(4)
    k, n, eps = 64, 24, 1e-5
    w = rng.standard_normal((n, k), dtype=np.float32)
    gamma = rng.standard_normal(k, dtype=np.float32)
    beta = rng.standard_normal(k, dtype=np.float32) if with_beta else None
    session = make_session(norm_graph(tmp_path, w, gamma, beta, cpu_library, norm, eps), torch.device("cpu"))
    x = (rng.standard_normal((2, 3, k)) * 3 + 1).astype(np.float32)
    y, got = session.run(None, {"x": x})
    expected = normed(torch.from_numpy(x), torch.from_numpy(gamma), None if beta is None else torch.from_numpy(beta),
                      norm, eps).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(y, expected @ w.T, rtol=1e-4, atol=1e-4)


def test_linear_refuses_a_norm_without_its_output_or_scale(cpu_library, tmp_path):
    w, g = np.ones((4, 8), dtype=np.float32), np.ones(8, dtype=np.float32)
    for inputs, outputs, attrs, message in [
        (["x", "w", "", "", "g"], ["y"], {"norm": 1}, "a norm needs the second output N"),
        (["x", "w"], ["y", "n"], {"norm": 2}, "a norm needs its scale G"),
        (["x", "w"], ["y", "n"], {}, "the node has no norm"),
        (["x", "w", "", "", "g"], ["y", "n"], {"norm": 3}, r"norm is 0 \(none\), 1 \(LayerNorm\) or 2 \(RMSNorm\)"),
    ]:
        node = helper.make_node("Linear", inputs, outputs, domain=custom_ops.DOMAIN, **attrs)
        graph = helper.make_graph([node], "linear", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                                  [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                                  [numpy_helper.from_array(w, "w"), numpy_helper.from_array(g, "g")])
        model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17),
                                                                       helper.make_opsetid(custom_ops.DOMAIN, 1)])
        folder = tmp_path / str(len(list(tmp_path.iterdir())))
        folder.mkdir()
        shutil.copy(cpu_library, folder / custom_ops.FILE)
        onnx.save(model, str(folder / "linear.onnx"))
        with pytest.raises(Exception, match=message):
            make_session(folder / "linear.onnx", torch.device("cpu")).run(None, {"x": np.ones((1, 8), np.float32)})


@pytest.mark.parametrize("dtype, warps", [(np.float16, ""), (np.float16, "16"), (np.float32, "")])
@pytest.mark.parametrize("k", [2048, 4096, 16384])
@pytest.mark.parametrize("norm, with_beta", [(1, True), (2, False)])
def test_linear_on_cuda_normalises_its_input_first(cuda_library, tmp_path, monkeypatch, dtype, warps, k, norm,
                                                   with_beta):
    """The norm inside the few-row kernel (its rows in shared memory), in a kernel of its own where they do not fit
    (16384 float32 features; two rows of 16384 float16), inside the tensor-core kernel (an RMSNorm, 3-16 float16
    rows, also of a large scale; also with 16 warps a block, whose gamma is read at use) or in a kernel of its own
    before it (a LayerNorm), and before cuBLAS (float32 from 3 rows, 17 rows)."""
    if warps:
        monkeypatch.setenv("NNDF_ORT_LINEAR_DOT_WARPS", warps)
    n, eps = 520, 1e-5
    gen = torch.Generator().manual_seed(k + norm)
    w = (torch.randn(n, k, generator=gen) * k ** -0.5).numpy().astype(dtype)
    gamma = (1 + 0.1 * torch.randn(k, generator=gen)).numpy().astype(dtype)
    beta = (0.1 * torch.randn(k, generator=gen)).numpy().astype(dtype) if with_beta else None
    session = make_session(norm_graph(tmp_path, w, gamma, beta, cuda_library, norm, eps), torch.device("cuda", 0),
                           stream=torch.cuda.Stream())
    torch_type = torch.float16 if dtype == np.float16 else torch.float32
    tol = 4e-3 if dtype == np.float16 else 1e-4
    for rows, scale in [(1, 2), (2, 2), (3, 2), (5, 2), (8, 2), (8, 300), (9, 2), (16, 2), (17, 2)]:
        x = (torch.randn(1, rows, k, generator=gen) * scale + 0.5).to(torch_type)
        y, got = session.run(None, {"x": x.numpy()})
        expected = normed(x, torch.from_numpy(gamma), None if beta is None else torch.from_numpy(beta), norm, eps)
        torch.testing.assert_close(torch.from_numpy(got).float(), expected, rtol=tol, atol=tol,
                                   msg=f"N, {rows} rows x {scale}")
        product = torch.from_numpy(got).float() @ torch.from_numpy(w).float().T  # from N as the kernel rounded it
        torch.testing.assert_close(torch.from_numpy(y).float(), product, rtol=tol, atol=tol,
                                   msg=f"Y, {rows} rows x {scale}")


def gated_graph(folder: Path, w: np.ndarray, library: Path, activation: int, norm: tuple | None = None) -> Path:
    """y = Linear(x, w, activation=2|3) (w's rows gate and up pairs), its product P named; with `norm` (kind,
    gamma), the norm first (N named)."""
    inits = [numpy_helper.from_array(w, "w")]
    inputs, attrs = ["x", "w"], {"activation": activation}
    if norm:
        inits.append(numpy_helper.from_array(norm[1], "g"))
        inputs += ["", "", "g"]
        attrs.update(norm=norm[0], epsilon=1e-5)
    node = helper.make_node("Linear", inputs, ["y", "n" if norm else "", "p"], domain=custom_ops.DOMAIN, **attrs)
    return saved_graph(folder, node, inits, ELEM[w.dtype.type], library)


def gated_reference(x: torch.Tensor, w: torch.Tensor, activation: int) -> torch.Tensor:
    """act(x . w[0::2]^T) * (x . w[1::2]^T) in fp32: SiLU (2) or GELU's tanh form (3)."""
    gate, up = x.float() @ w[0::2].float().T, x.float() @ w[1::2].float().T
    act = torch.nn.functional.silu(gate) if activation == 2 else torch.nn.functional.gelu(gate, approximate="tanh")
    return act * up


@pytest.mark.parametrize("activation", [2, 3])
def test_linear_gates_pairs_of_rows_on_the_cpu(cpu_library, tmp_path, activation):
    rng = np.random.default_rng(5)
    w = rng.standard_normal((2 * 12, 16), dtype=np.float32)
    session = make_session(gated_graph(tmp_path, w, cpu_library, activation), torch.device("cpu"))
    x = rng.standard_normal((2, 3, 16), dtype=np.float32)
    (y,) = session.run(None, {"x": x})
    assert y.shape == (2, 3, 12)
    np.testing.assert_allclose(y, gated_reference(torch.from_numpy(x), torch.from_numpy(w), activation).numpy(),
                               rtol=1e-4, atol=1e-4)


def test_a_gated_linear_refuses_an_odd_width_and_an_addend(cpu_library, tmp_path):
    w = np.ones((5, 8), dtype=np.float32)
    session = make_session(gated_graph(tmp_path, w, cpu_library, 2), torch.device("cpu"))
    with pytest.raises(Exception, match="a gated activation needs an even number of weight rows and no addend"):
        session.run(None, {"x": np.ones((1, 1, 8), np.float32)})


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("activation", [2, 3])
@pytest.mark.parametrize("norm", [None, 2])
def test_linear_on_cuda_gates_pairs_of_rows(cuda_library, tmp_path, dtype, activation, norm):
    """The gate in the few-row and tensor-core kernels' epilogues (1, 2; 3, 9 rows in float16) and after cuBLAS's
    product (17 rows; float32 from 3), with and without an RMSNorm before the product."""
    k, n = 2048, 2 * 1000
    gen = torch.Generator().manual_seed(activation)
    w = (torch.randn(n, k, generator=gen) * k ** -0.5).numpy().astype(dtype)
    gamma = (1 + 0.1 * torch.randn(k, generator=gen)).numpy().astype(dtype)
    session = make_session(gated_graph(tmp_path, w, cuda_library, activation, (norm, gamma) if norm else None),
                           torch.device("cuda", 0), stream=torch.cuda.Stream())
    torch_type = torch.float16 if dtype == np.float16 else torch.float32
    tol = 4e-3 if dtype == np.float16 else 1e-4
    for rows in (1, 2, 3, 9, 17):
        x = torch.randn(1, rows, k, generator=gen).to(torch_type)
        (y,) = session.run(None, {"x": x.numpy()})
        inputs = normed(x, torch.from_numpy(gamma), None, norm, 1e-5).to(torch_type) if norm else x
        expected = gated_reference(inputs, torch.from_numpy(w), activation)
        torch.testing.assert_close(torch.from_numpy(y).float(), expected, rtol=tol, atol=tol, msg=f"{rows} rows")
