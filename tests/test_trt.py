"""TensorRT backend parts that need no TensorRT: profiles, names, flag validation, the step bookkeeping (KV
buffers, binding shapes, profile choice, beam reordering; run through the shared loop with ONNX Runtime
executing each bound step), and the TensorRT-missing path. Engine builds are verified on a GPU by
tools/bench/trt_check.sh (docs/VERIFICATION.md); engine execution is not
verified by this suite (it needs TensorRT and a CUDA GPU)."""
import ctypes
import importlib.util

import numpy as np
import pytest
import torch

from CausalLM.trt import decoder_profiles
from NNDF.backends.trt.profiles import engine_name, engine_shapes, model_positions
from NNDF.backends.trt.steps import KVBuffers
from NNDF.errors import UsageError
from NNDF.backends.trt.options import TRTOptions
from NNDF.options import ModelOptions

from conftest import cli_in_process, run_cli


class Cfg:
    max_position_embeddings = 256  # HF's standard name (GPT-2's n_positions is an alias of it)


def test_static_batch_profiles_with_cache():
    shapes = engine_shapes(Cfg(), ModelOptions(batch_size=2, num_beams=3, use_cache=True),
                           TRTOptions(input_profile_max_len=64, output_profile_max_len=32))
    assert (shapes.rows.min, shapes.rows.opt, shapes.rows.max) == (6, 6, 6)
    assert (shapes.max_input, shapes.max_output, shapes.max_total) == (64, 32, 96)
    prompt, step = decoder_profiles(shapes, {"past.0.key": (4, 16)}, True, use_cache=True)
    # the prompt pass runs before beam expansion: 2 rows, then the steps run 2 x 3 beams
    assert prompt.shapes["input_ids"] == ((2, 1), (2, 32), (2, 64))
    assert prompt.shapes["past.0.key"] == ((2, 4, 0, 16),) * 3
    assert step.shapes["input_ids"] == ((6, 1),) * 3
    assert step.shapes["attention_mask"] == ((6, 2), (6, 49), (6, 96))
    assert step.shapes["past.0.key"] == ((6, 4, 1, 16), (6, 4, 48, 16), (6, 4, 95, 16))


def test_dynamic_batch_and_no_cache_profile():
    shapes = engine_shapes(Cfg(), ModelOptions(batch_size=4), TRTOptions(dynamic_batch=True, min_dynamic_batch=1,
                                                                        max_dynamic_batch=8, n_positions=128))
    assert (shapes.rows.min, shapes.rows.opt, shapes.rows.max) == (1, 4, 8)
    (full,) = decoder_profiles(shapes, {}, False, use_cache=False)
    assert full.shapes == {"input_ids": ((1, 1), (4, 64), (8, 128)), "attention_mask": ((1, 1), (4, 64), (8, 128))}


@pytest.mark.parametrize("low,batch,high", [(2, 1, 8), (1, 9, 8)])
def test_batch_outside_dynamic_range(low, batch, high):
    with pytest.raises(UsageError, match="min-dynamic-batch <= --batch-size <= --max-dynamic-batch"):
        engine_shapes(Cfg(), ModelOptions(batch_size=batch),
                      TRTOptions(dynamic_batch=True, min_dynamic_batch=low, max_dynamic_batch=high))


def test_flag_validation():
    with pytest.raises(UsageError, match="min-dynamic-batch 9 > --max-dynamic-batch 8"):
        TRTOptions(dynamic_batch=True, min_dynamic_batch=9, max_dynamic_batch=8)
    with pytest.raises(UsageError, match="--engine-postfix"):
        TRTOptions(engine_postfix="../x")


def test_positions_from_config_or_default():
    class Bloom:  # ALiBi: no position limit in the config
        pass

    assert model_positions(Cfg()) == 256 and model_positions(Bloom()) == 2048


def test_engine_names_follow_the_options():
    opts = ModelOptions(batch_size=4, fp16=True, use_cache=True)
    trt = TRTOptions(dynamic_batch=True, max_dynamic_batch=8, engine_postfix="A100")
    name = engine_name("GPT2", "EleutherAI/gpt-neo-125m", opts, trt, engine_shapes(Cfg(), opts, trt))
    assert name == "engine-GPT2-EleutherAI--gpt-neo-125m-fp16-kv-dynbatch1-8-beams1-in256-out256-pos256-A100"
    nokv = ModelOptions(use_cache=False)
    other = engine_name("GPT2", "gpt2", nokv, TRTOptions(), engine_shapes(Cfg(), nokv, TRTOptions()))
    assert other == "engine-GPT2-gpt2-fp32-nokv-batch1-beams1-in256-out256-pos256"


def test_kv_buffers_ping_pong_and_reorder():
    """The bookkeeping the TensorRT steps rely on, with CPU tensors standing in for device buffers."""
    kv = KVBuffers([(2, 3), (2, 3)], max_rows=6, max_total=8, dtype=torch.float32, device="cpu")
    past = kv.past(2, 0)
    assert [t.shape for t in past] == [torch.Size([2, 2, 0, 3])] * 2
    present = kv.present(2, 4)  # the prompt pass writes 4 positions into the other buffer
    for i, t in enumerate(present):
        t.copy_(torch.arange(t.numel(), dtype=torch.float32).view(t.shape) + 100 * i)
    expected = [t.clone() for t in present]
    kv.swap()
    assert all(torch.equal(a, b) for a, b in zip(kv.past(2, 4), expected))  # no copy: same memory
    assert all(t.is_contiguous() for t in kv.present(2, 5))
    index = torch.tensor([1, 1, 1, 0, 0, 0])  # beam expansion / reordering: 2 rows -> 6
    kv.reorder(index, rows=2, length=4)
    for got, want in zip(kv.past(6, 4), expected):
        assert torch.equal(got, want[index])
    with pytest.raises(UsageError, match="exceed the engine's profile maxima"):
        kv.present(7, 4)


@pytest.mark.skipif(importlib.util.find_spec("tensorrt") or importlib.util.find_spec("tensorrt_rtx"),
                    reason="TensorRT is installed here")
def test_tensorrt_missing_is_one_line(tmp_path, capsys):
    """The refusal through run.py (the whole program: exit code, one line, no traceback); list in process (list
    through run.py is test_cli.py's)."""
    proc = cli_in_process(capsys, "list")
    assert "| trt" in proc.stdout and "pip install tensorrt" in proc.stdout
    proc = run_cli("benchmark", "GPT2", "trt", "--device", "cpu", "-wd", str(tmp_path))
    # what is missing here, never "use --device ...": TensorRT, and a CUDA GPU for torch
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr
    assert lines[0].startswith("error: the trt backend needs TensorRT >= 10") and "torch sees no CUDA GPU" in lines[0]
    from NNDF.backends.trt.engine import import_trt
    from NNDF.errors import BackendUnavailable

    with pytest.raises(BackendUnavailable, match=r"pip install tensorrt.*neither tensorrt nor tensorrt_rtx"):
        import_trt("auto")
    with pytest.raises(BackendUnavailable, match="--trt-module tensorrt_rtx is not importable here"):
        import_trt("tensorrt_rtx")


def test_build_needs_a_backend_with_artifacts(tmp_path, capsys):
    """In process: refused before any model loads; build and run go through run.py in test_cli.py."""
    proc = cli_in_process(capsys, "build", "GPT2", "frameworks", "-wd", str(tmp_path))
    assert proc.returncode == 2 and "the frameworks backend has nothing to build" in proc.stderr
    proc = cli_in_process(capsys, "run", "GPT2", "onnxrt", "--build-only", "-wd", str(tmp_path))
    assert proc.returncode == 2 and "run.py build MODEL BACKEND" in proc.stderr


class OrtIO:
    """EngineIO with ONNX Runtime standing in for the TensorRT engine (not a TensorRT imitation: nothing here is
    reported as a TensorRT result). It reads every input from, and writes every output to, the address and shape
    TrtSteps bound, so TrtSteps' buffers, views, ping-pong swaps, reordering and profile choice run for real."""

    _NP = {"tensor(float)": np.float32, "tensor(int64)": np.int64}
    _TORCH = {"tensor(float)": torch.float32, "tensor(int64)": torch.int64}

    def __init__(self, path):
        import onnxruntime as ort

        self.session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        self.meta = {v.name: v for v in self.session.get_inputs() + self.session.get_outputs()}
        self.inputs = [v.name for v in self.session.get_inputs()]
        self.outputs = [v.name for v in self.session.get_outputs()]
        self.bound, self.profiles, self.graph_keys = {}, [], []

    def shape(self, name):
        return tuple(d if isinstance(d, int) else -1 for d in self.meta[name].shape)

    def dtype(self, name):
        return self._TORCH[self.meta[name].type]

    def select_profile(self, index):
        self.profiles.append(index)

    def bind(self, name, tensor, is_input):
        self.bound[name] = (tensor.data_ptr(), tuple(tensor.shape))

    def _memory(self, name):
        ptr, shape = self.bound[name]
        dtype = np.dtype(self._NP[self.meta[name].type])
        nbytes = int(np.prod(shape)) * dtype.itemsize
        raw = (ctypes.c_char * max(nbytes, 1)).from_address(ptr)
        return np.frombuffer(raw, dtype=dtype, count=nbytes // dtype.itemsize).reshape(shape)

    def execute(self, graph_key=None):
        self.graph_keys.append(graph_key)
        results = self.session.run(self.outputs, {n: self._memory(n).copy() for n in self.inputs})
        for name, value in zip(self.outputs, results):
            target = self._memory(name)
            assert target.shape == value.shape, (name, target.shape, value.shape)
            target[...] = value


@pytest.mark.parametrize("family,cache", [("GPT2", "kv"), ("GPT2", "nokv"), ("BLOOM", "kv"), ("GPT2", "static"),
                                          ("BLOOM", "static")])
def test_trt_steps_bookkeeping_gives_hf_tokens(family, cache, workdir):
    """TrtSteps through the shared loop (greedy and beam, padded batch), with ONNX Runtime executing each
    bound step, equals HF generate: the binding shapes, buffer views and beam reordering are right."""
    from NNDF import registry
    from NNDF.actions.common import encode
    from CausalLM.onnxrt import DecoderOnnx
    from CausalLM.trt_steps import TrtSteps
    from NNDF.context import make_context
    from NNDF.generation import GenerationConfig, generate

    use_cache = cache != "nokv"
    run = make_context(registry.family(family), ModelOptions(working_dir=str(workdir), use_cache=use_cache,
                                                             static_cache=cache == "static", use_mask=True,
                                                             device="cpu"))
    path, _ = DecoderOnnx(registry.backend(run.family, "onnxrt").onnx.spec, run.family.task).path(run)
    prompt = encode(run, ["The for statement is used to", "A", "Names refer to"])
    ids, mask = prompt.input_ids, prompt.attention_mask
    model, tok = run.torch_model(), run.tokenizer
    for beams in (1, 3):
        io = OrtIO(path)
        steps = TrtSteps(io, "cpu", use_cache, max_rows=3 * beams, max_total=ids.shape[1] + 8)
        out = generate(steps, ids, mask, GenerationConfig(max_new_tokens=8, num_beams=beams,
                                                          eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id))
        ref = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8, do_sample=False, num_beams=beams,
                             use_cache=use_cache, pad_token_id=tok.pad_token_id)
        for r in range(3):
            new = ref[r, ids.shape[1]:].tolist()
            if tok.eos_token_id in new:
                new = new[: new.index(tok.eos_token_id) + 1]
            assert out.new_tokens(r, tok.eos_token_id) == new, (beams, r)
        if use_cache:
            assert io.profiles == [0, 1]  # prompt profile once, then the one-token-step profile
            assert io.graph_keys[0] is None and all(k is not None for k in io.graph_keys[1:])
            if cache == "static":  # one shape for every step: a graph per buffer parity, not per position
                assert len(set(io.graph_keys[1:])) <= 2, set(io.graph_keys[1:])
        else:
            assert io.profiles == [0] and set(io.graph_keys) == {None}


def test_engine_fingerprint_follows_the_onnx(tmp_path):
    """The engine cache key changes when the ONNX it was built from is re-exported or edited (cheaply: no hashing)."""
    import os

    from NNDF.backends.trt.backend import _onnx_identity

    onnx_file = tmp_path / "model.onnx"
    onnx_file.write_bytes(b"graph v1")
    (tmp_path / "fingerprint.json").write_text('{"export": 1}')
    first = _onnx_identity(onnx_file)
    assert first["export"] == {"export": 1} and "model.onnx.data" not in first
    onnx_file.write_bytes(b"graph v2, longer")
    os.utime(onnx_file, ns=(1, 1))
    assert _onnx_identity(onnx_file) != first
    (tmp_path / "model.onnx.data").write_bytes(b"w")
    assert "model.onnx.data" in _onnx_identity(onnx_file)
