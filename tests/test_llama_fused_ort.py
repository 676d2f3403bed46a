"""`onnxrt --fused-decode` for the LLAMA family: the fused decode graph (GroupQueryAttention with grouped key/value
heads, rotary tables and the sliding window, SkipSimplifiedLayerNormalization, SwiGLU; LLAMA/fused_onnx.py).

On the CPU (fp32): generation gives HF `generate`'s tokens, token for token, for the offline variants of the five
model types (llama-offline, the trained default, where the tree has it; llama3-offline: llama3 rope scaling;
mistral-offline: a sliding window that the prompt + new tokens exceed; qwen2-offline: q/k/v biases, tied
embeddings; qwen3-offline: head norms, a head size other than hidden / heads; phi3-offline: fused qkv_proj and
gate_up_proj) and four tiny random models with what the variants lack (Llama's attention and MLP biases with linear
rope scaling; Qwen2's per-layer sliding window with YaRN; Qwen3's with drawn head-norm gains; Phi-3's partial rotary
factor and window): greedy, 3 beams, EOS mid-way, a second generation on the same buffers;
and the plain onnxrt export's tokens (mistral-offline). Padded batches, rope types whose tables change with the
length, models the op cannot run and checkpoints with weights the graph leaves out are refused by message.

With HARNESS_TEST_DEVICE=cuda (fp16: the CUDA kernel has no fp32), the window's prompt-pass logits are compared
with HF's (a window one key off is far outside fp16 noise), and the CUDA-graph step must give the tokens of the
same graph run uncaptured; the tokens of the plain fp16 static graph are compared and the first difference reported
(fp16 kernels differ: not asserted).
"""
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from NNDF import registry
from NNDF.actions.common import backend_steps
from CausalLM.ort_fused import FusedDecodeOnnx
from NNDF.context import make_context
from NNDF.errors import UsageError
from NNDF.options import ModelOptions

from conftest import ROOT, cli_in_process, random_model
from test_fused_decode_ort import _hf as hf_tokens, _tokens as fused_tokens

DEVICE = os.environ.get("HARNESS_TEST_DEVICE", "cpu")
FP16 = DEVICE == "cuda"
NEW, ROWS, PROMPT = 12, 3, 10  # 22 columns: past mistral-offline's window and the tiny models' (8, 12)
TRAINED = ROOT / "LLAMA" / "offline" / "llama-offline"  # the trained default, committed with its own tool
VARIANTS = ["llama3-offline", "mistral-offline", "qwen2-offline", "qwen3-offline", "phi3-offline",
            pytest.param("llama-offline", marks=pytest.mark.skipif(not (TRAINED / "config.json").is_file(),
                                                                   reason="llama-offline is not in this tree"))]
TINY = ["llama-biases", "qwen2-windowed", "qwen3-windowed", "phi3-partial"]


def _tiny_configs(tok) -> dict:
    """Random models (head size 32) with what the offline variants lack."""
    from transformers import LlamaConfig, Phi3Config, Qwen2Config, Qwen3Config

    from NNDF.offline import decoder_token_ids

    shape = dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, intermediate_size=96,
                 num_hidden_layers=2, max_position_embeddings=64, **decoder_token_ids(tok))
    return {
        "llama-biases": LlamaConfig(**shape, attention_bias=True, mlp_bias=True,
                                    rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}),
        "qwen2-windowed": Qwen2Config(**shape, use_sliding_window=True, sliding_window=8, max_window_layers=1,
                                      rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0,
                                                       "original_max_position_embeddings": 16}),
        # drawn head-norm gains, a window on the first layer only, no biases
        "qwen3-windowed": Qwen3Config(**shape, use_sliding_window=True, sliding_window=8, max_window_layers=1),
        "phi3-partial": Phi3Config(**shape, sliding_window=12, rope_parameters={
            "rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}),
    }


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, str]:
    """name -> model folder; every weight random (biases and norms too: `conftest.random_model`)."""
    from transformers import AutoTokenizer

    from LLAMA.config import BPE_TOKENIZER_DIR

    tok = AutoTokenizer.from_pretrained(BPE_TOKENIZER_DIR, local_files_only=True)
    return {name: random_model(config, tmp_path_factory.mktemp("models") / name, seed, BPE_TOKENIZER_DIR)
            for seed, (name, config) in enumerate(_tiny_configs(tok).items())}


def _run(workdir, model: dict, **flags):
    options = dict(working_dir=str(workdir), use_cache=True, use_mask=True, device=DEVICE, fp16=FP16,
                   static_cache=True, fused_decode=True)
    return make_context(registry.family("LLAMA"), ModelOptions(**{**options, **flags, **model}))


def _model(name: str, tiny: dict) -> dict:
    return {"torch_dir": tiny[name]} if name in TINY else {"variant": name}


def _prompt(vocab: int, rows: int = ROWS, length: int = PROMPT):
    ids = torch.randint(0, vocab - 1, (rows, length), generator=torch.Generator().manual_seed(1))
    return ids, torch.ones_like(ids)


def _tokens(steps, ids, mask, beams: int, eos: int | None, pad: int) -> list[list[int]]:
    return fused_tokens(steps, ids, mask, beams, eos, pad, new=NEW)


def _hf(run, ids, mask, beams: int, eos: int | None, pad: int) -> list[list[int]]:
    return hf_tokens(run, ids, mask, beams, eos, pad, new=NEW)


@pytest.mark.skipif(DEVICE != "cpu", reason="fp32 parity with HF generate runs on the CPU (CUDA: fp16 only)")
@pytest.mark.parametrize("name", VARIANTS + TINY)
def test_fused_graph_gives_hf_generate_tokens(name, tiny, workdir):
    run = _run(workdir, _model(name, tiny))
    config = run.source.config
    ids, mask = _prompt(config.vocab_size)
    pad = run.tokenizer.pad_token_id
    with backend_steps(run, "onnxrt") as (backend, steps):
        assert isinstance(backend.onnx, FusedDecodeOnnx)
        assert backend.export_max_diff() < 1e-3  # validated against PyTorch when built
        nodes = backend.onnx.record["nodes"]
        assert nodes["GroupQueryAttention"] == config.num_hidden_layers
        # per layer: 4 products, attention, 2 skip norms, SwiGLU's 5 nodes (+ the bias adds; Qwen3's head norms: a
        # split, two norms between two reshapes each and their 5 constants); embedding (a tied head's: a gather and
        # a transpose), norm, head
        head_norms = config.model_type == "qwen3"
        assert nodes.get("Reshape", 0) == 4 * head_norms * config.num_hidden_layers and "ScatterND" not in nodes
        assert nodes.get("Transpose", 0) == config.tie_word_embeddings
        assert sum(nodes.values()) <= (14 + 12 * head_norms) * config.num_hidden_layers + 4
        assert "Concat" not in nodes
        for beams in (1, 3):
            expected = _hf(run, ids, mask, beams, None, pad)
            assert _tokens(steps, ids, mask, beams, None, pad) == expected, f"beams={beams}"
        early = expected[0][2]  # a token the search emits early becomes the EOS: rows stop at different steps
        for beams in (1, 3):
            assert _tokens(steps, ids, mask, beams, early, pad) == _hf(run, ids, mask, beams, early, pad)


@pytest.mark.skipif(DEVICE != "cpu", reason="fp32 parity runs on the CPU (CUDA: fp16 only)")
def test_fused_graph_gives_plain_onnxrt_tokens(workdir):
    """mistral-offline (window exceeded): the fused graph's tokens are the plain static-cache export's."""
    model = {"variant": "mistral-offline"}
    ids, mask = _prompt(_run(workdir, model).source.config.vocab_size)
    results = []
    for fused in (True, False):
        run = _run(workdir, model, fused_decode=fused)
        with backend_steps(run, "onnxrt") as (_, steps):
            results.append([_tokens(steps, ids, mask, beams, None, run.tokenizer.pad_token_id) for beams in (1, 3)])
    assert results[0] == results[1]


def test_sliding_window_prompt_logits(workdir):
    """A 24-token prompt through mistral-offline's shorter window: the prompt pass, and the one-token steps after a
    shorter prompt, give HF's logits (no cache) at every position."""
    run = _run(workdir, {"variant": "mistral-offline"})
    assert run.source.config.sliding_window < 24
    model = run.torch_model()
    ids, _ = _prompt(run.source.config.vocab_size, rows=1, length=24)
    with torch.no_grad():
        expected = model(input_ids=ids.to(model.device)).logits.float()
    tolerance = 0.25 if FP16 else 1e-3  # fp16 noise is ~1e-2 here; a window one key off moves logits by > 1
    with backend_steps(run, "onnxrt") as (_, steps):
        ids, positions = ids.to(steps.device), torch.arange(24, device=steps.device)[None]
        whole, _ = steps.forward(ids, torch.ones_like(ids), positions, steps.new_cache(1, 32))
        assert (whole.float() - expected).abs().max() < tolerance
        logits, cache = steps.forward(ids[:, :6], torch.ones_like(ids[:, :6]), positions[:, :6], steps.new_cache(1, 32))
        stepped = [logits.float().clone()]
        for t in range(6, 24):
            mask = torch.ones_like(ids[:, :t + 1])
            logits, cache = steps.forward(ids[:, t:t + 1], mask, positions[:, t:t + 1], cache)
            stepped.append(logits.float().clone())
        assert (torch.cat(stepped, 1) - expected).abs().max() < tolerance


@pytest.mark.skipif(DEVICE != "cpu", reason="fp32 parity with HF generate runs on the CPU (CUDA: fp16 only)")
def test_padded_batch_gives_hf_generate_tokens(workdir):
    """Rows left-padded by different amounts (rotary positions from each row's own length, past the window):
    greedy and beams give HF `generate`'s tokens on the same padded batch."""
    run = _run(workdir, {"variant": "mistral-offline"})
    ids, mask = _prompt(run.source.config.vocab_size)
    mask[0, :2], mask[2, :5] = 0, 0
    pad = run.tokenizer.pad_token_id
    with backend_steps(run, "onnxrt") as (_, steps):
        for beams in (1, 3):
            assert _tokens(steps, ids, mask, beams, None, pad) == _hf(run, ids, mask, beams, None, pad), beams


def test_refusals(tiny):
    from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, Phi3Config

    from CausalLM import fused_graph as fg
    from LLAMA.fused_onnx import build, refusal
    from NNDF.errors import ArtifactError

    assert refusal(AutoConfig.from_pretrained(tiny["llama-biases"])) is None
    dynamic = LlamaConfig(rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0})
    assert "rope type 'dynamic' changes them with the sequence length" in refusal(dynamic)
    longrope = Phi3Config(hidden_size=128, num_attention_heads=4, original_max_position_embeddings=32,
                          rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0] * 16,
                                           "long_factor": [2.0] * 16})
    assert "rope type 'longrope'" in refusal(longrope)
    assert "activation is 'gelu'" in refusal(LlamaConfig(hidden_act="gelu"))
    assert refusal(LlamaConfig(hidden_size=64, num_attention_heads=4)) is None
    assert "this model's are 8 and 8" in refusal(LlamaConfig(hidden_size=64, num_attention_heads=8))
    model = AutoModelForCausalLM.from_pretrained(tiny["llama-biases"])
    model.model.layers[0].self_attn.q_norm = torch.nn.Parameter(torch.ones(32))  # a part the graph does not model
    with pytest.raises(ArtifactError, match=r"does not use 1 weights of this checkpoint "
                                            r"\(model.layers.0.self_attn.q_norm...\)"):
        build(model, fg.StateDict.of_model(model, "LLAMA"), fg.GraphBuilder(np.float32))
    family = registry.family("LLAMA")
    assert registry.backend(family, "onnxrt").fused_decode_types() == ("llama", "mistral", "qwen2", "qwen3", "phi3")
    with pytest.raises(UsageError, match="the trt backend has no fused decode step for model type 'llama'"):
        registry.backend(family, "trt").check_fused_decode("llama")


def test_cli_generate_and_refusal(tiny, workdir, capsys):
    """In process: generate --fused-decode on onnxrt through run.py is test_rotary_fused_ort.py's."""
    device = ["--fp16"] if FP16 else []
    proc = cli_in_process(capsys, "generate", "LLAMA", "onnxrt", "--variant", "qwen2-offline", "--use-cache",
                          "--static-cache", "--fused-decode", "--prompt", "Hello", "--max-new-tokens", "4", "-wd",
                          str(workdir), *device)
    assert proc.returncode == 0, proc.stderr
    assert "fused decode graph:" in proc.stdout and "GroupQueryAttention 2" in proc.stdout, proc.stdout
    folder = tiny["llama-biases"] + "-dynamic"  # refused in one line before anything is built
    shutil.copytree(tiny["llama-biases"], folder, dirs_exist_ok=True)
    config = json.loads((Path(folder) / "config.json").read_text())
    config["rope_parameters"]["rope_type"] = "dynamic"
    (Path(folder) / "config.json").write_text(json.dumps(config))
    proc = cli_in_process(capsys, "generate", "LLAMA", "onnxrt", "--torch-dir", folder, "--use-cache",
                          "--static-cache", "--fused-decode", "--prompt", "Hello", "--max-new-tokens", "4", "-wd",
                          str(workdir), *device)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: onnxrt --fused-decode computes the rotary tables once") and \
        "rope type 'dynamic'" in lines[0]


@pytest.mark.skipif(DEVICE != "cuda", reason="the CUDA graph of the fused step needs HARNESS_TEST_DEVICE=cuda")
@pytest.mark.parametrize("name", ["mistral-offline", "qwen2-offline"])
def test_cuda_graph_step_matches_uncaptured(name, workdir, capsys):
    model = {"variant": name}
    fused = _run(workdir, model, use_cuda_graph=True)
    ids, mask = _prompt(fused.source.config.vocab_size)
    pad, results = fused.tokenizer.pad_token_id, {}
    for label, run in (("graph", fused), ("uncaptured", _run(workdir, model)),
                       ("plain static", _run(workdir, model, fused_decode=False))):
        with backend_steps(run, "onnxrt") as (_, steps):
            results[label] = [_tokens(steps, ids, mask, beams, None, pad) for beams in (1, 3)]
    assert results["graph"] == results["uncaptured"]
    with capsys.disabled():  # fp16 kernels differ from the export's: reported, not asserted
        for beams, fused_rows, plain_rows in zip((1, 3), results["graph"], results["plain static"]):
            diffs = [(r, next((i for i, (a, b) in enumerate(zip(f, p)) if a != b), min(len(f), len(p))))
                     for r, (f, p) in enumerate(zip(fused_rows, plain_rows)) if f != p]
            print(f"\n{name} fused vs plain static fp16, beams={beams}: "
                  + (f"first differences (row, token): {diffs}" if diffs else "same tokens"))
