"""The one-token step's Triton kernels (NNDF/backends/decode_kernels.py) against torch references, and GPT-2's
fused step running them (`FusedSettings(kernels="triton")`) against its torch ops and HF `generate`.

On the CPU the kernels run in Triton's interpreter (TRITON_INTERPRET=1, numpy), when the triton package is
importable; the venv has none (nor does CI: these tests then skip, saying how to run them):
    .venv/bin/pip install --no-deps --target /tmp/tritonpkg triton==3.6.0
    PYTHONPATH=/tmp/tritonpkg .venv/bin/python -m pytest -q tests/test_decode_kernels.py
With HARNESS_TEST_DEVICE=cuda they run compiled on the GPU (the generation parity with a CUDA graph is in
tests/test_fused_decode.py, whose CUDA settings cases run these kernels).
Shapes are small versions of the real ones' edge cases: K and N not multiples of the blocks, 1, 3 and 8 (and 17:
two row chunks) rows, a left-padded row, the cache write at column 0 and at the last column.
"""
import importlib.util
import math
import os

import pytest

DEVICE = os.environ.get("HARNESS_TEST_DEVICE", "cpu")
if DEVICE == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")  # read when the kernels are defined: before their import
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None,
    reason="triton is not installed (expected in CI); to run these in Triton's CPU interpreter: .venv/bin/pip install "
           "--no-deps --target /tmp/tritonpkg triton==3.6.0, then PYTHONPATH=/tmp/tritonpkg pytest")
DTYPES = ["float32", "float16"]
TOLERANCE = {"float32": 2e-5, "float16": 2e-2}
# (rows, N, K): K not a power of two (1100; at 3 rows the norm statistics loop over 512-value chunks), N odd and
# past a block, the 16-row chunk edge
PRODUCTS = [(1, 45, 1100), (1, 37, 300), (3, 130, 1100), (8, 70, 260), (17, 33, 64)]
EPILOGUES = [dict(norm=True), dict(gelu="tanh", residual=True), dict(norm=True, gelu="none"), dict()]


def _torch():
    import torch

    return torch


def _linear_reference(x, w, b, norm, gelu, residual):
    import torch.nn.functional as F

    if norm is not None:  # the model's own order: the norm's output in x's dtype, then the product in fp32
        x = F.layer_norm(x.float(), (x.shape[1],), norm[0].float(), norm[1].float(), norm[2]).to(x.dtype)
    y = x.float() @ w.float().T + b.float()
    y = F.gelu(y, approximate=gelu) if gelu else y
    return y if residual is None else y + residual.float()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", PRODUCTS, ids=lambda s: "x".join(map(str, s)))
def test_linear_rows_matches_torch(shape, dtype):
    _check_linear_rows(shape, dtype)


@pytest.mark.parametrize("shape", [(1, 45, 1100), (3, 70, 1100)], ids=lambda s: "x".join(map(str, s)))
def test_linear_rows_with_small_tiles(shape, monkeypatch):
    """The real shapes' loops at small sizes: tiles of 256 weight values (the one-row path then loops over K
    in chunks of 128) and norm statistics in chunks (two passes over x)."""
    from NNDF.backends import decode_kernels

    monkeypatch.setattr(decode_kernels, "TILE_VALUES", 256)
    monkeypatch.setattr(decode_kernels, "STATS_VALUES", 512)
    assert decode_kernels.linear_config(1, 45, 1100)[:2] == (2, 128)
    _check_linear_rows(shape, "float32")


def _check_linear_rows(shape, dtype):
    from NNDF.backends.decode_kernels import linear_rows

    torch = _torch()
    rows, n, k = shape
    torch.manual_seed(rows + n)
    dt = getattr(torch, dtype)
    make = lambda *size, scale=1.0, shift=0.0: (torch.randn(*size) * scale + shift).to(DEVICE, dt)  # noqa: E731
    x, w, b = make(rows, k, scale=3.0, shift=2.0), make(n, k, scale=1 / math.sqrt(k)), make(n)
    for case in EPILOGUES:
        norm = (make(k), make(k), 1e-5) if case.get("norm") else None
        residual = make(rows, n) if case.get("residual") else None
        got = linear_rows(x, w, b, norm=norm, gelu=case.get("gelu"), residual=residual)
        assert got.shape == (rows, n) and got.dtype == dt
        expected = _linear_reference(x, w, b, norm, case.get("gelu"), residual)
        scale = expected.abs().max().item()
        assert (got.float() - expected).abs().max().item() <= TOLERANCE[dtype] * max(1.0, scale), case


def _attention_reference(q, keys, values, mask, write, scale):
    """q [R, H, D] over the buffers' columns <= write that the mask keeps, in fp32."""
    torch = _torch()
    columns = torch.arange(keys.shape[2], device=keys.device)
    valid = (columns[None, :] <= write) & (mask != 0)  # [R, L]
    scores = torch.einsum("rhd,rhld->rhl", q.float(), keys.float()) * scale
    p = torch.softmax(scores.masked_fill(~valid[:, None, :], float("-inf")), dim=-1)
    return torch.einsum("rhl,rhld->rhd", p, values.float())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [1, 3, 8])
def test_decode_attention_writes_and_attends(rows, dtype, monkeypatch):
    """With 16-column blocks (the real 128 would cover these 70 columns in one): the online softmax's loop."""
    from NNDF.backends import decode_kernels
    from NNDF.backends.decode_kernels import decode_attention

    monkeypatch.setattr(decode_kernels, "ATTENTION_COLUMNS", 16)
    torch = _torch()
    heads, dim, length = 3, 20, 70  # head size not a power of two; 70 columns: a partial last block
    dt = getattr(torch, dtype)
    torch.manual_seed(rows)
    for write in (0, 33, length - 1):
        keys, values = (torch.randn(rows, heads, length, dim).to(DEVICE, dt) for _ in range(2))
        qkv = torch.randn(rows, 3 * heads * dim).to(DEVICE, dt)
        mask = torch.ones(rows, length, dtype=torch.long, device=DEVICE)
        mask[-1, : write // 2] = 0  # the last row left-padded
        before_k, before_v = keys.clone(), values.clone()
        got = decode_attention(qkv, keys, values, torch.tensor([write], device=DEVICE), mask, heads=heads,
                               scale=1 / math.sqrt(dim))
        q, k, v = (t.reshape(rows, heads, dim) for t in qkv.split(heads * dim, dim=-1))
        before_k[:, :, write], before_v[:, :, write] = k, v
        assert torch.equal(keys, before_k) and torch.equal(values, before_v), f"write={write}: cache write"
        expected = _attention_reference(q, before_k, before_v, mask, write, 1 / math.sqrt(dim))
        diff = (got.float().reshape(rows, heads, dim) - expected).abs().max().item()
        assert diff <= TOLERANCE[dtype], f"write={write}: {diff}"


def test_bad_shapes_are_refused():
    from NNDF.backends.decode_kernels import decode_attention, linear_rows

    torch = _torch()
    with pytest.raises(ValueError, match=r"linear_rows: x \(2, 8\) and weight \(4, 6\) are not \[R, K\], \[N, K\]"):
        linear_rows(torch.zeros(2, 8, device=DEVICE), torch.zeros(4, 6, device=DEVICE))
    with pytest.raises(ValueError, match=r"gelu 'erf': one of tanh, none or None"):
        linear_rows(torch.zeros(2, 8, device=DEVICE), torch.zeros(4, 8, device=DEVICE), gelu="erf")
    buffers = torch.zeros(2, 4, 10, 8, device=DEVICE)
    with pytest.raises(ValueError, match=r"buffers \(2, 4, 10, 8\) do not hold 3 heads of qkv \(2, 96\)"):
        decode_attention(torch.zeros(2, 96, device=DEVICE), buffers, buffers, torch.zeros(1, dtype=torch.long),
                         torch.ones(2, 10, device=DEVICE), heads=3, scale=1.0)


@pytest.mark.skipif(DEVICE == "cuda", reason="on CUDA tests/test_fused_decode.py runs the kernels in its graph")
def test_fused_step_with_kernels_matches_hf():
    """GPT-2's fused step with the kernels (interpreted; a random 2-layer GPT-2, 3 rows, one left-padded): the
    prompt pass, then 4 greedy one-token steps; each step's logits are HF eager's over the whole sequence."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from GPT2.fused_decode import FusedGPT2Step, FusedSettings
    from NNDF.backends.torch_steps import TorchSteps

    torch = _torch()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=211, n_positions=64, n_embd=40, n_layer=2, n_head=4,
                                       initializer_range=0.3, bos_token_id=0, eos_token_id=0)).eval()
    fused = FusedGPT2Step(model, None, FusedSettings(kernels="triton"))
    assert fused.kernels == "triton" and FusedGPT2Step(model).kernels == "torch"  # the default everywhere
    steps = TorchSteps(model, True, static_cache=True, fused=fused)
    ids = torch.randint(0, 211, (3, 6))
    mask = torch.ones_like(ids)
    mask[2, :2] = 0
    with torch.inference_mode():
        slot = steps.new_cache(3, 16)
        logits, slot = steps.forward(ids, mask, (mask.cumsum(-1) - 1).clamp(min=0), slot, last_only=True)
        for _ in range(4):
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            expected = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, -1]
            assert (logits[:, -1] - expected).abs().max().item() < 1e-4
            token = logits[:, -1].argmax(-1, keepdim=True)
            ids, mask = torch.cat([ids, token], 1), torch.cat([mask, torch.ones_like(token)], 1)
            logits, slot = steps.forward(token, mask, positions[:, -1:] + 1, slot, last_only=True)
