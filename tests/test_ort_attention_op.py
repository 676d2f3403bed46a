"""This project's ONNX Runtime Attention op (`nndf.Attention`, NNDF/backends/onnxrt/ops/: ops.cc's CPU loop,
attention.cu's split-column kernels on CUDA) against an attention written here in torch: new tokens' queries over
a key/value cache with per-row lengths, packed or separate q/k/v, grouped key/value heads, a window, a position
bias by clipped distance, the new keys and values written into the cache (in place where present and past are one
buffer, into a copy where not); with causal=0 (cross-attention) every column of a cache the op only reads, with a
key bias hiding padded columns. CPU in fp32; with HARNESS_TEST_DEVICE=cuda also the CUDA kernel in fp16 (head
sizes 16 to 256, a cache long enough for 16 column ranges, replays of ONNX Runtime's CUDA graph)."""
from pathlib import Path

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper

from NNDF.backends.onnxrt import custom_ops
from NNDF.backends.onnxrt.steps import make_session

from test_ort_custom_ops import _cuda_library, write_graph

ELEM = {torch.float32: TensorProto.FLOAT, torch.float16: TensorProto.FLOAT16}
NP = {torch.float32: np.float32, torch.float16: np.float16}


def attention_graph(folder: Path, library: Path, dtype, heads: int, kv_heads: int, packed: bool, bias: bool,
                    window: int = 0, scale: float = 0.0) -> Path:
    elem = ELEM[dtype]
    names = ["q", "" if packed else "k", "" if packed else "v", "past_key", "past_value", "seqlens_k"]
    names += ["bias"] if bias else []
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT32 if n == "seqlens_k" else elem, None)
              for n in names if n]
    # the workspace is no graph output (as in the decode graphs: ONNX Runtime allocates it)
    outputs = [helper.make_tensor_value_info(n, elem, None) for n in ("y", "present_key", "present_value")]
    attrs = dict(num_heads=heads, kv_num_heads=kv_heads, **({"local_window_size": window} if window else {}),
                 **({"scale": scale} if scale else {}))
    node = helper.make_node("Attention", names, ["y", "present_key", "present_value", "workspace"],
                            domain=custom_ops.DOMAIN, **attrs)
    return write_graph(folder, library, "attention", [node], inputs, outputs)


def reference(q, k, v, cache_k, cache_v, seqlens, bias=None, window=0, scale=None):
    """(y [B, S, H * D], the caches with the new columns written), in float64: q [B, S, H, D], k / v [B, S, KV, D],
    caches [B, KV, L, D], seqlens [B] (total length - 1), bias [2R + 1, H] by key column minus query column."""
    batch, seq, heads, dim = q.shape
    kv = k.shape[2]
    cache_k, cache_v = cache_k.double().clone(), cache_v.double().clone()
    y = torch.zeros(batch, seq, heads, dim, dtype=torch.float64)
    scale = dim ** -0.5 if scale is None else scale
    for b in range(batch):
        start = int(seqlens[b]) + 1 - seq
        cache_k[b, :, start:start + seq] = k[b].double().transpose(0, 1)
        cache_v[b, :, start:start + seq] = v[b].double().transpose(0, 1)
        for s in range(seq):
            column = start + s
            first = max(0, column - window + 1) if window else 0
            for h in range(heads):
                keys = cache_k[b, h // (heads // kv), first:column + 1]
                scores = keys @ q[b, s, h].double() * scale
                if bias is not None:
                    reach = (bias.shape[0] - 1) // 2
                    rows = (torch.arange(first, column + 1) - column).clamp(-reach, reach) + reach
                    scores = scores + bias[rows, h].double()
                y[b, s, h] = scores.softmax(0) @ cache_v[b, h // (heads // kv), first:column + 1]
    return y.reshape(batch, seq, heads * dim), cache_k, cache_v


def case(seed: int, batch: int, seq: int, heads: int, kv: int, dim: int, length: int, dtype, bias: bool,
         lengths: list[int]):
    """Random inputs: every row's total length from `lengths` (its past then `seq` new tokens), the cache's
    columns filled with random values (those past a row's length must not be read)."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, seq, heads, dim, generator=gen)
    k, v = (torch.randn(batch, seq, kv, dim, generator=gen) for _ in range(2))
    cache_k, cache_v = (torch.randn(batch, kv, length, dim, generator=gen) for _ in range(2))
    seqlens = torch.tensor(lengths, dtype=torch.int32) - 1
    table = torch.randn(2 * 5 + 1, heads, generator=gen) if bias else None
    cast = (lambda t: None if t is None else t.to(dtype))
    return [cast(t) for t in (q, k, v, cache_k, cache_v)] + [seqlens, cast(table)]


def feeds(q, k, v, cache_k, cache_v, seqlens, table, packed: bool) -> dict:
    batch, seq = q.shape[:2]
    flat = [t.reshape(batch, seq, -1) for t in (q, k, v)]
    out = {"q": torch.cat(flat, -1)} if packed else dict(zip("qkv", flat))
    out.update(past_key=cache_k, past_value=cache_v, seqlens_k=seqlens)
    return out if table is None else {**out, "bias": table}


@pytest.fixture(scope="module")
def cpu_library(tmp_path_factory) -> Path:
    return custom_ops.build(tmp_path_factory.mktemp("ops-cpu"))


CPU_CASES = [  # (heads, kv heads, packed, bias, window, seq, per-row total lengths, cache length)
    (4, 4, True, False, 0, 1, [5, 9], 12),
    (4, 2, False, False, 0, 1, [1, 12], 12),
    (4, 4, True, True, 0, 3, [3, 7], 10),
    (6, 2, True, False, 3, 4, [4, 8], 8),
    (4, 1, False, True, 4, 1, [6, 2], 16),
]


@pytest.mark.parametrize("heads, kv, packed, bias, window, seq, lengths, length", CPU_CASES)
def test_attention_on_the_cpu_matches_torch_and_writes_the_cache_in_place(cpu_library, tmp_path, heads, kv, packed,
                                                                           bias, window, seq, lengths, length):
    """Present bound to past's buffer (as the decode graphs bind them): the new columns are written there."""
    dim = 8
    q, k, v, cache_k, cache_v, seqlens, table = case(0, len(lengths), seq, heads, kv, dim, length, torch.float32,
                                                      bias, lengths)
    expected, expected_k, expected_v = reference(q, k, v, cache_k, cache_v, seqlens, table, window)
    session = make_session(attention_graph(tmp_path, cpu_library, torch.float32, heads, kv, packed, bias, window),
                           torch.device("cpu"))
    inputs = {name: t.contiguous() for name, t in feeds(q, k, v, cache_k, cache_v, seqlens, table, packed).items()}
    y = torch.empty(len(lengths), seq, heads * dim)
    binding = session.io_binding()
    for name, t in inputs.items():
        binding.bind_input(name, "cpu", 0, np.int32 if name == "seqlens_k" else np.float32, tuple(t.shape),
                           t.data_ptr())
    binding.bind_output("y", "cpu", 0, np.float32, tuple(y.shape), y.data_ptr())
    for name, t in (("present_key", inputs["past_key"]), ("present_value", inputs["past_value"])):
        binding.bind_output(name, "cpu", 0, np.float32, tuple(t.shape), t.data_ptr())
    session.run_with_iobinding(binding)
    torch.testing.assert_close(y.double(), expected, rtol=1e-5, atol=1e-5)
    for b, total in enumerate(lengths):  # the written columns; those past a row's length are not the op's
        torch.testing.assert_close(inputs["past_key"][b, :, :total].double(), expected_k[b, :, :total])
        torch.testing.assert_close(inputs["past_value"][b, :, :total].double(), expected_v[b, :, :total])


def test_attention_copies_the_past_into_a_present_of_its_own(cpu_library, tmp_path):
    """Present and past as separate buffers: the past is copied, the new column added, the past left as it was."""
    q, k, v, cache_k, cache_v, seqlens, _ = case(1, 2, 1, 4, 4, 8, 6, torch.float32, False, [3, 6])
    expected, expected_k, expected_v = reference(q, k, v, cache_k, cache_v, seqlens)
    session = make_session(attention_graph(tmp_path, cpu_library, torch.float32, 4, 4, True, False),
                           torch.device("cpu"))
    inputs = {n: t.numpy() for n, t in feeds(q, k, v, cache_k, cache_v, seqlens, None, True).items()}
    past = inputs["past_key"].copy()
    y, present_k, present_v = session.run(None, inputs)
    np.testing.assert_allclose(y, expected.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(present_k, expected_k.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(present_v, expected_v.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(inputs["past_key"], past)


def cross_graph(folder: Path, library: Path, dtype, heads: int) -> Path:
    """Attention with causal=0: q over a cache it only reads, with a key bias [B, L]."""
    elem = ELEM[dtype]
    names = ["q", "", "", "cross_key", "cross_value", "", "", "key_bias"]
    inputs = [helper.make_tensor_value_info(n, elem, None) for n in names if n]
    node = helper.make_node("Attention", names, ["y", "", "", "workspace"], domain=custom_ops.DOMAIN, num_heads=heads,
                            causal=0, scale=0.5)
    return write_graph(folder, library, "cross", [node], inputs, [helper.make_tensor_value_info("y", elem, None)])


def cross_case(dtype, batch=2, seq=1, heads=4, dim=16, length=20):
    """q [B, S, H, D], the cross buffers [B, H, L, D], a key bias hiding row 0's last 5 columns and row 1's first 3
    (`masked` of the Seq2Seq graphs: large and finite), and the expected output in float64."""
    from Seq2Seq.fused_graph import masked

    gen = torch.Generator().manual_seed(5)
    q = torch.randn(batch, seq, heads, dim, generator=gen).to(dtype)
    key, value = (torch.randn(batch, heads, length, dim, generator=gen).to(dtype) for _ in range(2))
    key_bias = torch.zeros(batch, length)
    key_bias[0, -5:], key_bias[1, :3] = masked(np.float16), masked(np.float16)
    scores = torch.einsum("bshd,bhld->bshl", q.double(), key.double()) * 0.5 + key_bias.double()[:, None, None]
    expected = torch.einsum("bshl,bhld->bshd", scores.softmax(-1), value.double()).reshape(batch, seq, heads * dim)
    return {"q": q.reshape(batch, seq, -1), "cross_key": key, "cross_value": value,
            "key_bias": key_bias.to(dtype)}, expected


def test_cross_attention_reads_every_column_of_a_cache_it_does_not_write(cpu_library, tmp_path):
    inputs, expected = cross_case(torch.float32, seq=3)
    session = make_session(cross_graph(tmp_path, cpu_library, torch.float32, 4), torch.device("cpu"))
    before = inputs["cross_key"].clone()
    (y,) = session.run(None, {n: t.numpy() for n, t in inputs.items()})
    np.testing.assert_allclose(y, expected.numpy(), rtol=1e-5, atol=1e-5)
    assert torch.equal(inputs["cross_key"], before)


def test_attention_refuses_heads_that_do_not_fit(cpu_library, tmp_path):
    """By message: at the session's creation (the node's attributes) and at a run (the inputs' shapes)."""
    with pytest.raises(Exception, match="num_heads must be positive and a multiple of kv_num_heads"):
        make_session(attention_graph(tmp_path / "a", cpu_library, torch.float32, 4, 3, True, False),
                     torch.device("cpu")).run(None, {})
    q, k, v, cache_k, cache_v, seqlens, _ = case(2, 1, 1, 4, 2, 8, 4, torch.float32, False, [2])
    session = make_session(attention_graph(tmp_path / "b", cpu_library, torch.float32, 4, 4, True, False),
                           torch.device("cpu"))  # the cache has 2 kv heads, the node says 4
    inputs = {n: t.numpy() for n, t in feeds(q, k, v, cache_k, cache_v, seqlens, None, True).items()}
    with pytest.raises(Exception, match="past_key / past_value \\[B, kv_num_heads"):
        session.run(None, inputs)


@pytest.fixture(scope="module")
def cuda_library(tmp_path_factory) -> Path:
    return _cuda_library(tmp_path_factory)


def _run_cuda(session, inputs: dict, y: torch.Tensor, stream) -> None:
    """One run with present bound to past's buffers."""
    binding = session.io_binding()
    for name, t in inputs.items():
        elem = np.int32 if name == "seqlens_k" else NP[t.dtype]
        binding.bind_input(name, "cuda", 0, elem, tuple(t.shape), t.data_ptr())
    binding.bind_output("y", "cuda", 0, NP[y.dtype], tuple(y.shape), y.data_ptr())
    for name, t in (("present_key", inputs["past_key"]), ("present_value", inputs["past_value"])):
        binding.bind_output(name, "cuda", 0, NP[t.dtype], tuple(t.shape), t.data_ptr())
    with torch.cuda.stream(stream):
        session.run_with_iobinding(binding)
    torch.cuda.synchronize()


CUDA_CASES = [  # (heads, kv heads, head size, packed, bias, window, seq, per-row total lengths, cache length)
    (32, 32, 128, True, False, 0, 1, [200, 129], 256),
    (32, 8, 128, False, False, 0, 1, [1, 70], 256),
    (32, 32, 64, True, True, 0, 1, [150], 192),
    (12, 12, 64, True, False, 0, 128, [128], 256),  # a prompt pass
    (4, 4, 16, True, True, 0, 5, [9, 5], 32),
    (8, 8, 144, False, False, 64, 1, [300], 384),
    (8, 2, 256, True, False, 0, 2, [2000, 700], 2048),  # 16 column ranges of 128
    (6, 6, 48, True, False, 16, 7, [7, 40], 64),
]


@pytest.mark.parametrize("heads, kv, dim, packed, bias, window, seq, lengths, length", CUDA_CASES)
def test_attention_on_cuda_matches_torch(cuda_library, tmp_path, heads, kv, dim, packed, bias, window, seq, lengths,
                                         length):
    q, k, v, cache_k, cache_v, seqlens, table = case(3, len(lengths), seq, heads, kv, dim, length, torch.float16,
                                                      bias, lengths)
    expected, expected_k, expected_v = reference(q, k, v, cache_k, cache_v, seqlens, table, window)
    stream = torch.cuda.Stream()
    session = make_session(attention_graph(tmp_path, cuda_library, torch.float16, heads, kv, packed, bias, window),
                           torch.device("cuda", 0), stream=stream)
    inputs = {n: t.contiguous().cuda() for n, t in feeds(q, k, v, cache_k, cache_v, seqlens, table, packed).items()}
    y = torch.empty(len(lengths), seq, heads * dim, dtype=torch.float16, device="cuda")
    _run_cuda(session, inputs, y, stream)
    torch.testing.assert_close(y.double().cpu(), expected, rtol=2e-3, atol=2e-3)
    for b, total in enumerate(lengths):
        torch.testing.assert_close(inputs["past_key"][b, :, :total].double().cpu(), expected_k[b, :, :total])
        torch.testing.assert_close(inputs["past_value"][b, :, :total].double().cpu(), expected_v[b, :, :total])


def test_cross_attention_on_cuda_matches_torch(cuda_library, tmp_path):
    inputs, expected = cross_case(torch.float16, seq=1, heads=32, dim=64, length=128)
    stream = torch.cuda.Stream()
    session = make_session(cross_graph(tmp_path, cuda_library, torch.float16, 32), torch.device("cuda", 0),
                           stream=stream)
    inputs = {n: t.contiguous().cuda() for n, t in inputs.items()}
    y = torch.empty(2, 1, 32 * 64, dtype=torch.float16, device="cuda")
    binding = session.io_binding()
    for name, t in inputs.items():
        binding.bind_input(name, "cuda", 0, np.float16, tuple(t.shape), t.data_ptr())
    binding.bind_output("y", "cuda", 0, np.float16, tuple(y.shape), y.data_ptr())
    with torch.cuda.stream(stream):
        session.run_with_iobinding(binding)
    torch.cuda.synchronize()
    torch.testing.assert_close(y.double().cpu(), expected, rtol=2e-3, atol=2e-3)


def test_attention_replays_from_a_cuda_graph(cuda_library, tmp_path):
    """Captured once, replayed with new queries, keys, values and lengths in the same buffers: each replay's output
    and cache as a fresh run's."""
    heads, dim, length = 16, 128, 256
    stream = torch.cuda.Stream()
    session = make_session(attention_graph(tmp_path, cuda_library, torch.float16, heads, heads, True, False),
                           torch.device("cuda", 0), stream=stream, cuda_graph=True)
    _, _, _, cache_k, cache_v, _, _ = case(4, 1, 1, heads, heads, dim, length, torch.float16, False, [1])
    inputs = {"q": torch.empty(1, 1, 3 * heads * dim, dtype=torch.float16, device="cuda"),
              "past_key": cache_k.cuda(), "past_value": cache_v.cuda(),
              "seqlens_k": torch.zeros(1, dtype=torch.int32, device="cuda")}
    y = torch.empty(1, 1, heads * dim, dtype=torch.float16, device="cuda")
    binding = session.io_binding()
    for name, t in inputs.items():
        binding.bind_input(name, "cuda", 0, np.int32 if name == "seqlens_k" else np.float16, tuple(t.shape),
                           t.data_ptr())
    binding.bind_output("y", "cuda", 0, np.float16, tuple(y.shape), y.data_ptr())
    binding.bind_output("present_key", "cuda", 0, np.float16, (1, heads, length, dim), inputs["past_key"].data_ptr())
    binding.bind_output("present_value", "cuda", 0, np.float16, (1, heads, length, dim),
                        inputs["past_value"].data_ptr())
    import onnxruntime as ort

    options = ort.RunOptions()
    options.add_run_config_entry("gpu_graph_id", "0")
    for step, total in enumerate([10, 11, 12, 200]):
        q, k, v = (torch.randn(1, 1, heads, dim, generator=torch.Generator().manual_seed(step)).half()
                   for _ in range(3))
        before_k, before_v = inputs["past_key"].cpu(), inputs["past_value"].cpu()
        seqlens = torch.tensor([total - 1], dtype=torch.int32)
        expected, expected_k, _ = reference(q, k, v, before_k, before_v, seqlens)
        with torch.cuda.stream(stream):
            inputs["q"].copy_(torch.cat([q, k, v], 2).reshape(1, 1, -1))
            inputs["seqlens_k"].copy_(seqlens)
            session.run_with_iobinding(binding, options)
        torch.cuda.synchronize()
        torch.testing.assert_close(y.double().cpu(), expected, rtol=2e-3, atol=2e-3, msg=f"step {step}")
        torch.testing.assert_close(inputs["past_key"][0, :, :total].double().cpu(), expected_k[0, :, :total])
