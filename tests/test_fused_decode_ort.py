"""`onnxrt --fused-decode`: the GPT-2 fused decode graph (GroupQueryAttention writing a shared past/present
buffer, SkipLayerNormalization, FastGelu / BiasGelu; CausalLM/ort_fused.py, GPT2/fused_onnx.py).

On the CPU (fp32): the graph is validated against PyTorch when built and is small (one attention op per layer, no
Reshape / Transpose / ScatterND); generation gives HF `generate`'s tokens, token for token, for gpt2-offline and
a tiny random GPT-2 with the exact-erf GELU and per-layer attention scaling: greedy, beam search, EOS mid-way, a
second generation on the same buffers. Padded batches and every model, backend and option without a fused graph
are refused by message (CLI: exit code 2).

With HARNESS_TEST_DEVICE=cuda (fp16: the CUDA kernel has no fp32), the CUDA-graph step must give the tokens of
the same graph run uncaptured, and the tokens of the plain fp16 static graph are compared and the first
difference reported (fp16 kernels differ: not asserted).
"""
import json
import os
import re
import shutil
from pathlib import Path

import pytest
import torch

from GPT2.config import FUSED_GELUS
from GPT2.export import FUSED_DECODE
from NNDF import registry
from NNDF.actions.common import backend_steps
from CausalLM.ort_fused import FusedDecodeOnnx, device_refusal
from NNDF.backends.onnxrt.options import ORTOptions
from NNDF.context import make_context
from NNDF.errors import UsageError
from NNDF.generation import GenerationConfig, generate
from NNDF.options import ModelOptions

from conftest import ROOT, cli_in_process

DEVICE = os.environ.get("HARNESS_TEST_DEVICE", "cpu")
FP16 = DEVICE == "cuda"
NEW, ROWS, PROMPT = 10, 3, 6
OFFLINE = ROOT / "GPT2" / "offline" / "gpt2-offline"


@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory) -> str:
    """A random 2-layer GPT-2 (head size 16) with the exact GELU and attention scaled by 1 / layer index."""
    from transformers import GPT2Config, GPT2LMHeadModel

    folder = tmp_path_factory.mktemp("models") / "tiny-gpt2"
    config = GPT2Config(vocab_size=4096, n_positions=64, n_embd=64, n_layer=2, n_head=4, activation_function="gelu",
                        scale_attn_by_inverse_layer_idx=True, bos_token_id=4095, eos_token_id=4095)
    torch.manual_seed(0)
    GPT2LMHeadModel(config).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt"):
        if (OFFLINE / name).is_file():
            shutil.copy(OFFLINE / name, folder / name)
    return str(folder)


@pytest.fixture(scope="module")
def relu_gpt2(tiny_gpt2) -> str:
    """tiny_gpt2 with a ReLU MLP: a GPT-2 the fused graph refuses (no fused op for its activation)."""
    folder = tiny_gpt2 + "-relu"
    shutil.copytree(tiny_gpt2, folder, dirs_exist_ok=True)
    config = json.loads(Path(folder, "config.json").read_text())
    Path(folder, "config.json").write_text(json.dumps({**config, "activation_function": "relu"}))
    return folder


def _run(workdir, model: dict, **flags):
    options = dict(working_dir=str(workdir), use_cache=True, use_mask=True, device=DEVICE, fp16=FP16,
                   static_cache=True, fused_decode=True)
    return make_context(registry.family("GPT2"), ModelOptions(**{**options, **flags, **model}))


def _model(name: str, tiny: str) -> dict:
    return {"variant": "gpt2-offline"} if name == "gpt2-offline" else {"torch_dir": tiny}


def _prompt(vocab: int, rows: int = ROWS):
    ids = torch.randint(0, vocab - 1, (rows, PROMPT), generator=torch.Generator().manual_seed(1))
    return ids, torch.ones_like(ids)


def _tokens(steps, ids, mask, beams: int, eos: int | None, pad: int, new: int = NEW) -> list[list[int]]:
    """New tokens per row, twice on the same buffers (and captured graph), which must agree."""
    config = GenerationConfig(max_new_tokens=new, num_beams=beams, eos_token_id=eos, pad_token_id=pad)
    runs = []
    for _ in range(2):
        out = generate(steps, ids.to(steps.device), mask.to(steps.device), config)
        runs.append([out.new_tokens(r, eos) for r in range(ids.shape[0])])
    assert runs[0] == runs[1], "a second generation on the same buffers differs"
    return runs[0]


def _hf(run, ids, mask, beams: int, eos: int | None, pad: int, new: int = NEW) -> list[list[int]]:
    model = run.torch_model()
    out = model.generate(input_ids=ids.to(model.device), attention_mask=mask.to(model.device), max_new_tokens=new,
                         num_beams=beams, do_sample=False, eos_token_id=eos, pad_token_id=pad)
    rows = []
    for row in out[:, ids.shape[1]:].tolist():
        rows.append(row[: row.index(eos) + 1] if eos is not None and eos in row else row)
    return rows


@pytest.mark.skipif(DEVICE != "cpu", reason="fp32 parity with HF generate runs on the CPU (CUDA: fp16 only)")
@pytest.mark.parametrize("name", ["gpt2-offline", "tiny"])
def test_fused_graph_gives_hf_generate_tokens(name, tiny_gpt2, workdir):
    run = _run(workdir, _model(name, tiny_gpt2))
    config = run.source.config
    ids, mask = _prompt(config.vocab_size)
    pad = run.tokenizer.pad_token_id or config.eos_token_id
    with backend_steps(run, "onnxrt") as (backend, steps):
        assert isinstance(backend.onnx, FusedDecodeOnnx)
        assert backend.export_max_diff() < 1e-3  # validated against PyTorch when built
        nodes = backend.onnx.record["nodes"]
        assert nodes["GroupQueryAttention"] == config.n_layer
        # per layer 9 nodes; around them the embeddings' 2, the first norm, the head and the Slice of its positions
        assert not {"Reshape", "Transpose", "ScatterND"} & set(nodes) and sum(nodes.values()) == 9 * config.n_layer + 5
        for beams in (1, 3):
            expected = _hf(run, ids, mask, beams, None, pad)
            assert _tokens(steps, ids, mask, beams, None, pad) == expected, f"beams={beams}"
        early = expected[0][2]  # a token the search emits early becomes the EOS: rows stop at different steps
        for beams in (1, 3):
            assert _tokens(steps, ids, mask, beams, early, pad) == _hf(run, ids, mask, beams, early, pad)


@pytest.mark.skipif(DEVICE != "cpu", reason="the greedy token chosen beside the step is the CPU's path")
def test_cpu_greedy_steps_choose_their_tokens_as_the_loop_would(workdir, monkeypatch):
    """On the CPU a greedy generation's one-token steps choose and feed their own tokens (`greedy_forward`); the
    loop's own path (`forward`, its processors, `pick_tokens`) runs only the prompt pass. A left-padded row and an
    EOS that row 0 emits second when free, forbidden for the first 6 new tokens (min_new_tokens: the EOS mask on
    the step's logits): HF `generate`'s tokens."""
    from collections import Counter

    from transformers import GenerationConfig as HFConfig

    run = _run(workdir, {"variant": "gpt2-offline"})
    ids, mask = _prompt(run.source.config.vocab_size)
    mask[1, :3] = 0
    pad = run.tokenizer.pad_token_id or run.source.config.eos_token_id
    calls = Counter()
    with backend_steps(run, "onnxrt") as (_, steps):
        eos = _tokens(steps, ids, mask, 1, None, pad)[0][1]
        for name in ("forward", "greedy_forward"):
            def counted(*args, _method=getattr(steps, name), _name=name, **kwargs):
                calls[_name] += 1
                return _method(*args, **kwargs)
            monkeypatch.setattr(steps, name, counted)
        config = GenerationConfig(max_new_tokens=NEW, eos_token_id=eos, pad_token_id=pad, min_new_tokens=6)
        out = generate(steps, ids, mask, config)
        got = [out.new_tokens(r, eos) for r in range(ROWS)]
    assert calls["forward"] == 1 and calls["greedy_forward"] == max(map(len, got)) - 1  # the prompt pass, then steps
    assert got[0][1] != eos  # forbidden there
    hf = run.torch_model().generate(input_ids=ids, attention_mask=mask, generation_config=HFConfig(
        max_new_tokens=NEW, min_new_tokens=6, do_sample=False, eos_token_id=eos, pad_token_id=pad))
    assert got == [row[: row.index(eos) + 1] if eos in row else row for row in hf[:, ids.shape[1]:].tolist()]


@pytest.mark.skipif(DEVICE != "cpu", reason="fp32 parity with HF generate runs on the CPU (CUDA: fp16 only)")
def test_padded_batch_gives_hf_generate_tokens(workdir):
    """Rows left-padded by different amounts: each row's prompt pass runs over its own tokens, later steps at each
    row's length; greedy and beams give HF `generate`'s tokens on the same padded batch."""
    run = _run(workdir, {"variant": "gpt2-offline"})
    ids, mask = _prompt(run.source.config.vocab_size)
    mask[0, :2], mask[2, :4] = 0, 0
    pad = run.tokenizer.pad_token_id or run.source.config.eos_token_id
    with backend_steps(run, "onnxrt") as (_, steps):
        for beams in (1, 3):
            assert _tokens(steps, ids, mask, beams, None, pad) == _hf(run, ids, mask, beams, None, pad), beams


def test_prompt_pass_computes_the_head_at_the_last_position_when_asked(workdir):
    """A prompt pass with `last_only` (the generation's) gives [B, 1, V]: the graph's head runs on the last
    position only (ONNX Runtime writes the bound output at that shape), with the logits the full pass gives there;
    a left-padded batch's rows too (each row's last token is the last column)."""
    run = _run(workdir, {"variant": "gpt2-offline"})
    ids, mask = _prompt(run.source.config.vocab_size)
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    with backend_steps(run, "onnxrt") as (_, steps):
        for padded in (False, True):
            if padded:
                mask[0, :2], mask[2, :4] = 0, 0
                positions = (mask.cumsum(1) - 1).clamp(min=0)
            got = {}
            for last_only in (False, True):
                cache = steps.new_cache(ROWS, PROMPT + NEW)
                logits, _ = steps.forward(ids.to(steps.device), mask.to(steps.device), positions.to(steps.device),
                                          cache, last_only=last_only)
                got[last_only] = logits.float().cpu().clone()
            assert got[False].shape[:2] == (ROWS, PROMPT) and got[True].shape[:2] == (ROWS, 1)
            torch.testing.assert_close(got[True][:, 0], got[False][:, -1], atol=2e-2 if FP16 else 1e-4, rtol=0)


def test_refusals(relu_gpt2, workdir):
    assert "GroupQueryAttention CUDA kernel is registered for float16 and bfloat16 only" in \
        device_refusal("fp32", "cuda")
    assert device_refusal("fp16", "cuda") is None and device_refusal("fp32", "cpu") is None
    for flags, message in ((dict(torch_dir=relu_gpt2), r"no fused op for activation 'relu' \(it has gelu_new, "),
                           (dict(variant="gpt2-offline", decoder_onnx=__file__), r"leave the --\*-onnx files out")):
        run = _run(workdir, flags)
        with pytest.raises(UsageError, match=message):
            registry.backend(run.family, "onnxrt").build(run)
    if DEVICE == "cuda":  # the CUDA kernel has no fp32
        run = _run(workdir, {"variant": "gpt2-offline"}, fp16=False)
        with pytest.raises(UsageError, match="on cuda needs --fp16"):
            registry.backend(run.family, "onnxrt").build(run)
    family = registry.family("GPT2")
    assert registry.backend(family, "onnxrt").fused_decode_types() == tuple(FUSED_DECODE)
    # every decoder and encoder-decoder model type has a graph; the refusal of one without (an encoder's) names
    # the model types that have one
    with pytest.raises(UsageError, match="the onnxrt backend has no fused decode step for model type 'bert'") as refused:
        registry.backend(registry.family("BERT"), "onnxrt").check_fused_decode("bert")
    assert set(FUSED_DECODE) <= set(re.search(r"onnxrt: ([\w, ]+)", str(refused.value)).group(1).split(", "))
    with pytest.raises(UsageError, match="the trt backend has no fused decode step for model type 'gpt2'"):
        registry.backend(family, "trt").check_fused_decode("gpt2")  # TensorRT does not parse ORT's contrib ops
    # --fused-decode with --quantize: the quantized fused graph runs for decoder-only models on the CPU only
    t5 = registry.family("T5")
    with pytest.raises(UsageError, match=r"--fused-decode with --quantize: the fused graph is quantized only for "
                                         r"decoder-only models on the CPU \(this run: a seq2seq model on cpu\)"):
        registry.backend(t5, "onnxrt").variants(make_context(t5, ModelOptions(
            variant="t5-offline", working_dir=str(workdir), use_cache=True, static_cache=True, fused_decode=True,
            device="cpu"), ORTOptions(quantize=("none", "int8"))))
    if DEVICE == "cuda":
        with pytest.raises(UsageError, match=r"quantized only for .* \(this run: a decoder model on cuda\)"):
            registry.backend(family, "onnxrt").variants(make_context(family, ModelOptions(
                variant="gpt2-offline", working_dir=str(workdir), use_cache=True, static_cache=True,
                fused_decode=True, device=DEVICE, fp16=FP16), ORTOptions(quantize=("none", "int8"))))


def test_cli_refusal_exit_code(relu_gpt2, workdir, capsys):
    proc = cli_in_process(capsys, "chat", "GPT2", "onnxrt", "--torch-dir", relu_gpt2, "--use-cache", "--static-cache",
                          "--fused-decode", "--prompt", "Hello", "--max-new-tokens", "2", "-wd", str(workdir),
                          *(["--fp16"] if FP16 else []))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0] == ("error: onnxrt --fused-decode has no fused op for activation 'relu' "
                                            f"(it has {', '.join(FUSED_GELUS)})")


@pytest.mark.skipif(DEVICE != "cuda", reason="the CUDA graph of the fused step needs HARNESS_TEST_DEVICE=cuda")
def test_cuda_graph_step_matches_uncaptured(workdir, capsys):
    fused = _run(workdir, {"variant": "gpt2-offline"}, use_cuda_graph=True)
    ids, mask = _prompt(fused.source.config.vocab_size)
    pad, results = fused.tokenizer.pad_token_id, {}
    for label, run in (("graph", fused), ("uncaptured", _run(workdir, {"variant": "gpt2-offline"})),
                       ("plain static", _run(workdir, {"variant": "gpt2-offline"}, fused_decode=False))):
        with backend_steps(run, "onnxrt") as (_, steps):
            results[label] = [_tokens(steps, ids, mask, beams, None, pad) for beams in (1, 3)]
    assert results["graph"] == results["uncaptured"]
    with capsys.disabled():  # fp16 kernels differ from the export's: reported, not asserted
        for beams, fused_rows, plain_rows in zip((1, 3), results["graph"], results["plain static"]):
            diffs = [(r, next((i for i, (a, b) in enumerate(zip(f, p)) if a != b), min(len(f), len(p))))
                     for r, (f, p) in enumerate(zip(fused_rows, plain_rows)) if f != p]
            print(f"\nfused vs plain static fp16, beams={beams}: "
                  + (f"first differences (row, token): {diffs}" if diffs else "same tokens"))
    padded = mask.clone()
    padded[0, :2] = 0  # reported, not asserted: fp16 kernels may differ between batch shapes
    with backend_steps(fused, "onnxrt") as (_, steps), capsys.disabled():
        rows = _tokens(steps, ids, padded, 1, None, pad)
        alone = [_tokens(steps, ids[r:r + 1, int(padded[r].argmax()):], mask[r:r + 1, int(padded[r].argmax()):], 1,
                         None, pad)[0] for r in range(ids.shape[0])]
        print(f"\npadded batch vs each row alone, fp16 greedy: {'same tokens' if rows == alone else (rows, alone)}")


@pytest.mark.skipif(DEVICE != "cpu", reason="runs on the CPU")
def test_built_from_checkpoint_files_without_torch_model(workdir, monkeypatch):
    """The graph is built from the checkpoint's safetensors files (the model's structure from its config on the meta
    device); once the artifact is current, a run loads no PyTorch model at all."""
    run = _run(workdir, {"variant": "gpt2-offline"})
    with backend_steps(run, "onnxrt") as (backend, _):
        assert backend.onnx.record["built_from"] == "checkpoint files"
    import NNDF.context

    def refuse(*args, **kwargs):
        raise AssertionError("the PyTorch model was loaded")

    monkeypatch.setattr(NNDF.context, "load_torch_model", refuse)
    run = _run(workdir, {"variant": "gpt2-offline"})
    ids, mask = _prompt(run.source.config.vocab_size)
    with backend_steps(run, "onnxrt") as (backend, steps):
        assert isinstance(backend.onnx, FusedDecodeOnnx)
        generate(steps, ids, mask, GenerationConfig(max_new_tokens=3))


def test_static_cache_takes_the_fused_graph_by_default(workdir):
    """onnxrt --static-cache without --fused-decode builds the fused graph where the model type has one;
    --no-fused-decode takes the torch.onnx export, and so do quantized graphs except on the CPU, where they take the
    fused graph quantized; the notes say which graph ran."""
    from NNDF.backends.onnxrt.quantized import QuantizedOnnx
    from CausalLM.onnxrt import DecoderOnnx

    products = "the Linear op" if DEVICE == "cuda" else "ONNX Runtime's MatMul"  # --ort-products' defaults
    for fused, kind, note in ((None, FusedDecodeOnnx, f"fused decode graph built from the weights (default; products: "
                                                      f"{products})"),
                              (False, DecoderOnnx, "torch.onnx static-cache export (--no-fused-decode)")):
        run = _run(workdir, {"variant": "gpt2-offline"}, fused_decode=fused)
        backend = registry.backend(run.family, "onnxrt")
        backend.use_fused(run)
        assert type(backend.onnx) is kind and backend.export_notes()[0] == f"decoder graph: the {note}"
    run = make_context(registry.family("GPT2"), ModelOptions(variant="gpt2-offline", working_dir=str(workdir),
                       use_cache=True, static_cache=True, device=DEVICE, fp16=FP16), ORTOptions(quantize=("int4" if FP16 else "int8",)))
    (quantized,) = registry.backend(run.family, "onnxrt").variants(run)
    quantized.use_fused(run)
    if DEVICE == "cpu":
        assert quantized.choice == "the fused decode graph built from the weights, int8 (default)"
        assert isinstance(quantized.onnx, QuantizedOnnx) and isinstance(quantized.onnx.base, FusedDecodeOnnx)
        # asked for by name: the same graph (the flag names what the default takes here)
        asked = make_context(registry.family("GPT2"), ModelOptions(
            variant="gpt2-offline", working_dir=str(workdir), use_cache=True, static_cache=True, fused_decode=True,
            device=DEVICE), ORTOptions(quantize=("int8",)))
        (named,) = registry.backend(asked.family, "onnxrt").variants(asked)
        named.use_fused(asked)
        assert named.choice == "the fused decode graph built from the weights, int8 (--fused-decode)"
        assert isinstance(named.onnx, QuantizedOnnx) and isinstance(named.onnx.base, FusedDecodeOnnx)
    else:
        assert quantized.choice == "the torch.onnx static-cache export (quantized graphs)"
