"""Our Triton kernels (`NNDF.backends.torch.kernels`) against plain torch: the GEMV in every tiling shape (split
sums, ragged edges, 1-8 rows, a bias) and the one-query attention (grouped heads, padding, a window, the write
position), in fp32 on the CPU under Triton's interpreter; with HARNESS_TEST_DEVICE=cuda compiled for the GPU, in
fp32 and fp16, and inside a torch.compile'd function."""
import os

import pytest
import torch

from NNDF.backends.torch import kernels  # under Triton's interpreter off CUDA (conftest.py)

DEVICE = os.environ.get("HARNESS_TEST_DEVICE", "cpu")

DTYPES = [torch.float32, torch.float16] if DEVICE == "cuda" else [torch.float32]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rows, out_features, in_features, tiling, dot", [
    (1, 96, 200, dict(programs=1, block_n=32, block_k=64), False),  # one split, a ragged last block of features
    (1, 50, 1000, dict(programs=64, block_n=8, block_k=64), False),  # split sums, a ragged last tile of outputs
    (3, 130, 1536, dict(programs=32, block_n=16, block_k=128), False),
    (8, 37, 64, dict(programs=40, block_n=4, block_k=32), False),
    # through tensor-core dots: rows padded to 16, ragged outputs and features, split or not
    (2, 96, 200, dict(programs=1, block_n=32, block_k=64), True),
    (3, 130, 1536, dict(programs=32, block_n=16, block_k=128), True),
    (8, 37, 1000, dict(programs=64, block_n=16, block_k=64), True),
    (16, 50, 64, dict(programs=1, block_n=16, block_k=256), True),
])
def test_gemv_matches_torch(rows, out_features, in_features, tiling, dot, dtype):
    torch.manual_seed(0)
    x = torch.randn(rows, in_features, device=DEVICE).to(dtype)
    weight = torch.randn(out_features, in_features, device=DEVICE).to(dtype)
    bias = torch.randn(out_features, device=DEVICE).to(dtype)
    config = (kernels.dot_config if dot else kernels.gemv_config)(rows, out_features, in_features, **tiling)
    assert config.dot == dot
    assert config.splits * config.k_per_split >= in_features > (config.splits - 1) * config.k_per_split
    expected = (x.double() @ weight.double().T + bias.double())
    got = kernels.gemv(x, weight, bias, config)
    assert got.dtype == dtype and got.shape == (rows, out_features)
    tolerance = 1e-4 if dtype == torch.float32 else 2e-2
    assert torch.allclose(got.double(), expected, rtol=tolerance, atol=tolerance * in_features ** 0.5)
    if tiling["programs"] > 1:
        assert config.splits > 1  # the case exercises the partial sums
    else:  # one slice: the kernel adds the bias and rounds once, exactly what the partial sums summed give
        assert config.splits == 1
        partials = kernels.gemv_partials(x, weight, config.block_n, config.block_k, 1, config.k_per_split,
                                         config.warps, config.dot)
        assert torch.equal(got, (partials.sum(0) + bias.float()).to(dtype))
    # relu(x) as the kernel loads it, the output in another dtype (T5's ReLU before its fp32 wo)
    relu = kernels.gemv(x, weight, bias, config, relu=True, dtype=torch.float64)
    assert relu.dtype == torch.float64
    expected_relu = x.double().clamp(min=0) @ weight.double().T + bias.double()
    assert torch.allclose(relu, expected_relu, rtol=tolerance, atol=tolerance * in_features ** 0.5)
    leading = kernels.gemv(x[None], weight, None, config)  # any leading shape, no bias
    assert leading.shape == (1, rows, out_features)
    assert torch.allclose(leading[0].double(), expected - bias.double(), rtol=tolerance,
                          atol=tolerance * in_features ** 0.5)


def test_products_of_a_weight_size_take_more_warps(monkeypatch):
    """On CUDA a one-row product whose weight has a size in `WIDE_WARPS`'s range takes its warps a program, one
    outside it its tiling's (both give torch's result); under Triton's interpreter (the CPU) neither takes them."""
    seen, tiled = [], kernels.gemv_config
    monkeypatch.setattr(kernels, "gemv_config", lambda *args, **tiling: seen.append(tiling.get("warps"))
                        or tiled(*args, **tiling))
    monkeypatch.setattr(kernels, "WIDE_WARPS", (64 * 200, 64 * 200 + 1, 8))
    torch.manual_seed(0)
    x = torch.randn(1, 200, device=DEVICE)
    for out_features in (64, 65):
        weight = torch.randn(out_features, 200, device=DEVICE)
        assert torch.allclose(kernels.gemv(x, weight).double(), x.double() @ weight.double().T, rtol=1e-4,
                              atol=1e-4 * 200 ** 0.5)
    assert seen == ([8, kernels.TILING["warps"]] if DEVICE == "cuda" else [None, None])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("norm_kind, activation", [("layer", None), ("rms", None), (None, "tanh"), (None, "none"),
                                                    ("layer", "relu")])
@pytest.mark.parametrize("rows, tiling, dot", [
    (1, dict(programs=1, block_n=32, block_k=64), False),  # one slice: the residual added in the kernel
    (3, dict(programs=64, block_n=8, block_k=64), False),  # split sums: the residual added after their sum
    (4, dict(programs=1, block_n=16, block_k=64), True),
    (5, dict(programs=64, block_n=16, block_k=64), True),
])
@pytest.mark.parametrize("stats_values", [kernels.STATS_VALUES, 64], ids=["one-load", "passes"])
def test_gemv_norm_activation_and_residual(norm_kind, activation, rows, tiling, dot, stats_values, dtype,
                                           monkeypatch):
    """What `gemv` applies as it loads its input (a layer or RMS norm over each row's features, then ReLU or
    either GELU) and the residual it adds after the product: the eager ops' results, each rounded to the input's
    dtype as those ops write it, split or not, in both kernels; the norm's statistics from one load of each row
    or (`STATS_VALUES` small) in passes over its features."""
    import torch.nn.functional as F

    monkeypatch.setattr(kernels, "STATS_VALUES", stats_values)

    torch.manual_seed(2)
    out_features, in_features = 72, 200  # a ragged last block of features: the statistics skip what is past it
    x = (3 + 2 * torch.randn(rows, in_features, device=DEVICE)).to(dtype)  # a mean far from 0
    weight = torch.randn(out_features, in_features, device=DEVICE).to(dtype) / 8
    bias, residual = (torch.randn(n, device=DEVICE).to(dtype) for n in (out_features, rows * out_features))
    residual = residual.view(rows, out_features)
    gain, shift = (torch.randn(in_features, device=DEVICE).to(dtype) for _ in range(2))
    norm = None if norm_kind is None else kernels.Norm(norm_kind, gain, shift if norm_kind == "layer" else None,
                                                       1e-5)
    h = x
    if norm_kind == "layer":
        h = F.layer_norm(x.float(), (in_features,), gain.float(), shift.float(), 1e-5).to(dtype)
    elif norm_kind == "rms":
        h = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)).to(dtype) * gain
    if activation == "relu":
        h = F.relu(h)
    elif activation is not None:
        h = F.gelu(h.float(), approximate=activation).to(dtype)
    product = (h.double() @ weight.double().T + bias.double()).to(dtype)
    config = (kernels.dot_config if dot else kernels.gemv_config)(rows, out_features, in_features, **tiling)
    assert (config.splits > 1) == (tiling["programs"] > 1)
    tolerance = 1e-4 if dtype == torch.float32 else 2e-2
    got = kernels.gemv(x, weight, bias, config, norm=norm, activation=activation)
    assert got.dtype == dtype and torch.allclose(got.double(), product.double(), rtol=tolerance, atol=tolerance)
    added = kernels.gemv(x, weight, bias, config, norm=norm, activation=activation, residual=residual)
    assert torch.equal(added, got + residual)  # the product rounded first, then added as eager adds


@pytest.mark.parametrize("rows, tiling, dot", [
    (2, dict(programs=1, block_n=16, block_k=64), False),  # the kernel writes the buffers
    (3, dict(programs=64, block_n=8, block_k=64), False),  # split: plain ops write them after the sum
    (4, dict(programs=1, block_n=16, block_k=64), True),
])
def test_gemv_writes_keys_and_values(rows, tiling, dot):
    """A q/k/v product's key and value columns also written into a K/V cache at the write position (grouped heads:
    fewer key/value heads than query heads), every other column of the buffers untouched."""
    torch.manual_seed(3)
    heads, kv_heads, dim, length, at = 4, 2, 8, 6, 4
    out_features = (heads + 2 * kv_heads) * dim
    x = torch.randn(rows, 40, device=DEVICE)
    weight, bias = torch.randn(out_features, 40, device=DEVICE), torch.randn(out_features, device=DEVICE)
    keys, values = (torch.randn(rows, kv_heads, length, dim, device=DEVICE) for _ in range(2))
    before_k, before_v = keys.clone(), values.clone()
    write = torch.tensor([at], device=DEVICE)
    config = (kernels.dot_config if dot else kernels.gemv_config)(rows, out_features, 40, **tiling)
    assert (config.splits > 1) == (tiling["programs"] > 1)
    cache = kernels.Cache(keys, values, write, heads * dim)
    got = kernels.gemv(x, weight, bias, config, cache=cache)
    assert torch.equal(got, kernels.gemv(x, weight, bias, config))
    k, v = got[:, heads * dim:].view(rows, 2, kv_heads, dim).unbind(1)
    assert torch.equal(keys[:, :, at], k) and torch.equal(values[:, :, at], v)
    others = [c for c in range(length) if c != at]
    assert torch.equal(keys[:, :, others], before_k[:, :, others])
    assert torch.equal(values[:, :, others], before_v[:, :, others])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rows, tiling, dot", [
    (1, dict(programs=1, block_n=32, block_k=64), False),
    (3, dict(programs=64, block_n=8, block_k=64), False),
    (4, dict(programs=1, block_n=16, block_k=64), True),
])
def test_gemv_swiglu_on_load(rows, tiling, dot, dtype):
    """SwiGLU applied as the kernel loads its input (a row of [gate | up], twice the product's features): the
    eager silu(gate) * up, each op rounded to the input's dtype."""
    import torch.nn.functional as F

    torch.manual_seed(4)
    out_features, in_features = 48, 200
    x = torch.randn(rows, 2 * in_features, device=DEVICE).to(dtype)
    weight, residual = torch.randn(out_features, in_features, device=DEVICE).to(dtype), torch.randn(
        rows, out_features, device=DEVICE).to(dtype)
    gate, up = x.chunk(2, dim=-1)
    h = (F.silu(gate.float()).to(dtype) * up).to(dtype)
    expected = (h.double() @ weight.double().T).to(dtype)
    config = (kernels.dot_config if dot else kernels.gemv_config)(rows, out_features, in_features, **tiling)
    got = kernels.gemv(x, weight, None, config, activation="swiglu", residual=residual)
    tolerance = 1e-4 if dtype == torch.float32 else 2e-2
    assert got.shape == (rows, out_features)
    assert torch.allclose((got - residual).double(), expected.double(), rtol=tolerance, atol=tolerance)


def test_gemv_sums_several_rows_through_dots(monkeypatch):
    """From `DOT_ROWS` rows in the weight's dtype `gemv` takes the dot form by default; one row, an input of
    another dtype (an fp32 stream into a half weight), more than 16 rows or DOT_ROWS None keep the elementwise
    form."""
    half, single = torch.float16, torch.float32
    assert kernels.uses_dot(2, half, half) and kernels.uses_dot(16, single, single)
    assert not kernels.uses_dot(1, half, half) and not kernels.uses_dot(17, half, half)
    assert not kernels.uses_dot(4, single, half)
    monkeypatch.setattr(kernels, "DOT_ROWS", None)
    assert not kernels.uses_dot(4, half, half)
    monkeypatch.undo()
    with pytest.raises(ValueError, match="17 rows: the dot form takes 1 to 16"):
        kernels.dot_config(17, 64, 64)
    torch.manual_seed(1)
    x, weight = torch.randn(4, 300, device=DEVICE), torch.randn(40, 300, device=DEVICE)
    tiling = kernels.DOT_TILING if DEVICE == "cuda" else kernels.INTERPRETED
    assert torch.equal(kernels.gemv(x, weight), kernels.gemv(x, weight, config=kernels.dot_config(4, 40, 300,
                                                                                                    **tiling)))
    # the slices: as many as reach the programs, or at most max_splits (the CUDA default: the partial sums' add
    # then unrolls into the kernel that reads them); the same product either way
    assert kernels.dot_config(8, 768, 3072, 1024, 64, 128, 4, None).splits == 24
    capped = kernels.dot_config(8, 40, 300, 1024, 16, 32, 4, 4)
    assert (capped.splits, kernels.dot_config(8, 40, 300, 1024, 16, 32, 4, None).splits) == (4, 10)
    eight = torch.randn(8, 300, device=DEVICE)
    assert torch.allclose(kernels.gemv(eight, weight, config=capped), eight @ weight.T, rtol=1e-5, atol=1e-4)
    # half inputs, T5's ReLU as the kernel loads them (still half: a dot takes one dtype), an fp32 output
    x, weight = x.half(), weight.half()
    got = kernels.gemv(x, weight, relu=True, dtype=torch.float32)
    assert got.dtype == torch.float32
    expected = x.double().clamp(min=0) @ weight.double().T
    assert torch.allclose(got.double(), expected, rtol=1e-4, atol=1e-3)


def _attention_reference(q, keys, values, kept, alibi=None, bias=None):
    groups = q.shape[1] // keys.shape[1]
    keys, values = (t.double().repeat_interleave(groups, 1) for t in (keys, values))
    scores = (q.double()[:, :, None] * keys).sum(-1) * q.shape[-1] ** -0.5  # [R, H, L]
    if alibi is not None:
        slopes, offsets = alibi
        scores = scores + slopes.double()[None, :, None] * offsets.double()[:, None, :]
    if bias is not None:
        scores = scores + bias.double()
    scores = scores.masked_fill(~kept[:, None], float("-inf"))
    return (scores.softmax(-1)[..., None] * values).sum(-2)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("write, window, block_l, kv_heads, extra", [
    (0, None, 16, 2, None), (37, None, 16, 2, None), (63, None, 64, 2, None), (50, 20, 16, 2, None),
    (12, 20, 8, 2, None), (37, None, 16, 6, "alibi"), (63, None, 0, 6, "alibi"), (40, None, 16, 6, "bias"),
    (63, None, 0, 6, "row-bias")])
@pytest.mark.parametrize("split", [False, True], ids=["one-program", "split"])
def test_decode_attention_matches_torch(write, window, block_l, kv_heads, extra, split, dtype):
    """Columns up to `write` that the padding keeps, inside the window; 6 query heads over 2 key/value heads; with
    ALiBi (BLOOM: 6 heads, each score plus slope_h * (key position - query position) among the row's kept
    columns) or an additive bias (T5's relative positions: [1, H, L] shared by the rows, -inf past the write
    position; or one per row, [R, H, L]); one program per row and head walking `block_l` columns a load, or
    (`split`) one per chunk of `block_l` columns, combined after (0: the default block or chunk)."""
    torch.manual_seed(1)
    rows, heads, length, dim = 3, 6, 64, 24  # a head size that is not a power of two
    q = torch.randn(rows, heads, dim, device=DEVICE).to(dtype)
    keys, values = (torch.randn(rows, kv_heads, length, dim, device=DEVICE).to(dtype) for _ in range(2))
    columns = torch.arange(length, device=DEVICE)
    valid = torch.ones(rows, length, dtype=torch.bool, device=DEVICE)
    valid[1, :5] = False  # left padding
    valid[2, 3:9] = False
    valid &= columns <= write
    if window:
        valid &= columns > write - window
    valid[:, write] = True  # the token being written always sees itself
    biases, bias = None, None
    if extra == "alibi":
        counted = valid.long().cumsum(-1)  # a kept column's position among the row's kept ones, + 1
        slopes = torch.rand(heads, 2, device=DEVICE)[:, 1] + 0.1  # a strided view, as HF's slopes come
        biases = (slopes, (counted - counted[:, -1:]).float())
    elif extra:
        bias = torch.randn(1 if extra == "bias" else rows, heads, length, device=DEVICE) * 2
        bias = bias.masked_fill(columns > write, float("-inf"))
    at = torch.tensor([write], device=DEVICE)
    if split:
        got = kernels.decode_attention_split(q, keys, values, valid, at, dim ** -0.5, window, chunk=block_l,
                                             alibi=biases, bias=bias)
    else:
        got = kernels.decode_attention(q, keys, values, valid, at, dim ** -0.5, window, block_l=block_l, alibi=biases,
                                       bias=bias)
    assert got.dtype == dtype and got.shape == q.shape
    tolerance = 1e-5 if dtype == torch.float32 else 5e-3
    expected = _attention_reference(q, keys, values, valid, biases, bias)
    assert torch.allclose(got.double(), expected, atol=tolerance)
    if extra:  # the biases change the result
        assert not torch.allclose(expected, _attention_reference(q, keys, values, valid), atol=1e-2)


def test_kernels_trace_into_one_graph():
    """torch.compile traces through both custom ops without a graph break (aot_eager: the kernels themselves run
    as they are; on the CPU under Triton's interpreter), as the fused steps compile them."""
    from CausalLM.fused_step import GEMV, product

    torch.manual_seed(3)
    x, weight = torch.randn(1, 96, device=DEVICE), torch.randn(200, 96, device=DEVICE)
    q, keys = torch.randn(1, 4, 16, device=DEVICE), torch.randn(1, 2, 32, 16, device=DEVICE)
    valid, write = torch.ones(1, 32, dtype=torch.bool, device=DEVICE), torch.tensor([20], device=DEVICE)

    def step(x, weight, q, keys, valid, write):
        return (torch.nn.functional.silu(product(x, weight, None, GEMV)),
                kernels.decode_attention(q, keys, keys, valid, write, 0.25, 8),
                kernels.decode_attention_split(q, keys, keys, valid, write, 0.25, 8, chunk=16) * 2)

    eager = step(x, weight, q, keys, valid, write)
    traced = torch.compile(step, backend="aot_eager", fullgraph=True)(x, weight, q, keys, valid, write)
    for a, b in zip(eager, traced):
        assert torch.allclose(a, b, atol=1e-5)


@pytest.mark.skipif(DEVICE != "cuda", reason="torch.compile around the kernels needs CUDA")
def test_kernels_inside_a_compiled_function():
    """inductor keeps both custom ops in its graph (the fused steps compile them with their neighbours)."""
    torch.manual_seed(2)
    x, weight = torch.randn(1, 896, device="cuda").half(), torch.randn(4864, 896, device="cuda").half()
    q, keys = torch.randn(1, 14, 64, device="cuda").half(), torch.randn(1, 2, 256, 64, device="cuda").half()
    valid, write = torch.ones(1, 256, dtype=torch.bool, device="cuda"), torch.tensor([200], device="cuda")

    def step(x, weight, q, keys, valid, write):
        h = torch.nn.functional.silu(kernels.gemv(x, weight))
        return (h, kernels.decode_attention(q, keys, keys, valid, write, 0.125),
                kernels.decode_attention_split(q, keys, keys, valid, write, 0.125))

    eager = step(x, weight, q, keys, valid, write)
    compiled = torch.compile(step, fullgraph=True)(x, weight, q, keys, valid, write)
    for a, b in zip(eager, compiled):
        assert torch.allclose(a.float(), b.float(), atol=1e-2)
