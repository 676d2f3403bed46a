"""`onnxrt --fused-decode` for GPT-Neo (HF model type gpt_neo): the fused decode graph (GroupQueryAttention unscaled,
"local" layers' window in the op, SkipLayerNormalization, FastGelu / BiasGelu; GPT2/fused_onnx_neo.py).

On the CPU (fp32): generation gives HF `generate`'s tokens, token for token, for gpt-neo-offline (one global and one
local layer, window 16) and a tiny random GPT-Neo with what the variant lacks (window 6, three local layers, random
layer norms and biases, the exact GELU, an untied head), prompt + new tokens past both windows: greedy, 3 beams,
EOS mid-way, a second generation on the same buffers; a left-padded batch. Models the graph cannot run and
checkpoints with weights it leaves out are refused by message.
"""
import os
import shutil

import numpy as np
import pytest
import torch

from NNDF import registry
from NNDF.actions.common import backend_steps
from CausalLM.ort_fused import FusedDecodeOnnx
from NNDF.context import make_context
from NNDF.options import ModelOptions

from test_fused_decode_ort import _hf as hf_tokens, _tokens as fused_tokens

DEVICE = os.environ.get("HARNESS_TEST_DEVICE", "cpu")
FP16 = DEVICE == "cuda"
NEW, ROWS, PROMPT = 12, 3, 10  # 22 columns: past gpt-neo-offline's window (16) and the tiny model's (6)
CPU_ONLY = pytest.mark.skipif(DEVICE != "cpu", reason="fp32 parity with HF generate runs on the CPU (CUDA: fp16 only)")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    """A random 4-layer GPT-Neo (head size 16; local, global, local, local; window 6) with the exact GELU, an inner
    size other than 4E and an untied head; every weight random (biases and norms too: HF initialises them to 0
    and 1)."""
    from transformers import AutoTokenizer, GPTNeoConfig, GPTNeoForCausalLM

    from GPT2.config import BPE_TOKENIZER_DIR
    from NNDF.offline import decoder_token_ids, redraw_weights

    tok = AutoTokenizer.from_pretrained(BPE_TOKENIZER_DIR, local_files_only=True)
    config = GPTNeoConfig(num_layers=4, hidden_size=64, num_heads=4, intermediate_size=96, max_position_embeddings=64,
                          attention_types=[[["local", "global"], 1], [["local"], 2]], window_size=6,
                          activation_function="gelu", tie_word_embeddings=False, **decoder_token_ids(tok))
    model = GPTNeoForCausalLM(config)
    redraw_weights(model, 0, 0.2)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 1:
                param.add_(torch.randn(param.shape, generator=generator) * 0.2)
    folder = tmp_path_factory.mktemp("models") / "tiny-neo"
    model.save_pretrained(folder)
    for path in BPE_TOKENIZER_DIR.glob("*.json"):
        shutil.copyfile(path, folder / path.name)
    return str(folder)


def _run(workdir, model: dict, **flags):
    options = dict(working_dir=str(workdir), use_cache=True, use_mask=True, device=DEVICE, fp16=FP16,
                   static_cache=True, fused_decode=True)
    return make_context(registry.family("GPT2"), ModelOptions(**{**options, **flags, **model}))


def _model(name: str, tiny: str) -> dict:
    return {"torch_dir": tiny} if name == "tiny" else {"variant": name}


def _prompt(vocab: int):
    ids = torch.randint(0, vocab - 1, (ROWS, PROMPT), generator=torch.Generator().manual_seed(1))
    return ids, torch.ones_like(ids)


@CPU_ONLY
@pytest.mark.parametrize("name", ["gpt-neo-offline", "tiny"])
def test_fused_graph_gives_hf_generate_tokens(name, tiny, workdir):
    run = _run(workdir, _model(name, tiny))
    config = run.source.config
    assert PROMPT + NEW > config.window_size and "local" in config.attention_layers
    ids, mask = _prompt(config.vocab_size)
    pad = run.tokenizer.pad_token_id
    with backend_steps(run, "onnxrt") as (backend, steps):
        assert isinstance(backend.onnx, FusedDecodeOnnx)
        assert backend.export_max_diff() < 1e-3  # validated against PyTorch when built
        assert backend.onnx.record["built_from"] == "checkpoint files"  # the tied head stored once there
        nodes = backend.onnx.record["nodes"]
        assert nodes["GroupQueryAttention"] == config.num_layers
        # per layer: 4 products, attention, 2 skip norms, GELU; the embeddings (a tied head's: a gather and a
        # transpose), their skip norm, the head and the Slice of its positions
        assert not {"Reshape", "ScatterND", "Add"} & set(nodes) and nodes["Slice"] == 1
        assert nodes.get("Transpose", 0) == config.tie_word_embeddings
        assert sum(nodes.values()) == 8 * config.num_layers + 5 + config.tie_word_embeddings
        for beams in (1, 3):
            expected = hf_tokens(run, ids, mask, beams, None, pad, new=NEW)
            assert fused_tokens(steps, ids, mask, beams, None, pad, new=NEW) == expected, f"beams={beams}"
        early = expected[0][2]  # a token the search emits early becomes the EOS: rows stop at different steps
        for beams in (1, 3):
            assert fused_tokens(steps, ids, mask, beams, early, pad, new=NEW) == \
                hf_tokens(run, ids, mask, beams, early, pad, new=NEW), f"beams={beams}, eos"


@CPU_ONLY
@pytest.mark.parametrize("name", ["gpt-neo-offline", "tiny"])
def test_padded_batch_gives_hf_generate_tokens(name, tiny, workdir):
    """Rows left-padded by different amounts, prompt + new tokens past the window: each row's prompt pass runs over
    its own tokens; greedy and beams give HF `generate`'s tokens on the same padded batch (HF's window slides over
    its columns, so its leading pads never displace a real token)."""
    run = _run(workdir, _model(name, tiny))
    ids, mask = _prompt(run.source.config.vocab_size)
    mask[0, :2], mask[2, :5] = 0, 0
    pad = run.tokenizer.pad_token_id
    with backend_steps(run, "onnxrt") as (_, steps):
        for beams in (1, 3):
            assert fused_tokens(steps, ids, mask, beams, None, pad, new=NEW) == \
                hf_tokens(run, ids, mask, beams, None, pad, new=NEW), beams


def test_refusals(tiny):
    from transformers import AutoConfig, GPTNeoConfig, GPTNeoForCausalLM

    from CausalLM import fused_graph as fg
    from GPT2.fused_onnx_neo import build, refusal
    from NNDF.errors import ArtifactError

    assert refusal(AutoConfig.from_pretrained(tiny)) is None
    neo_27b = GPTNeoConfig(hidden_size=2560, num_heads=20, num_layers=32, window_size=256,  # head size 128
                           attention_types=[[["global", "local"], 16]])
    assert refusal(neo_27b) is None
    assert "activation 'relu'" in refusal(GPTNeoConfig(activation_function="relu"))
    assert "head size that is a multiple of 8" in refusal(GPTNeoConfig(hidden_size=60, num_heads=6))
    assert "this model has ['sparse']" in refusal(GPTNeoConfig(attention_types=[[["global", "sparse"], 12]]))
    model = GPTNeoForCausalLM.from_pretrained(tiny)
    model.transformer.h[1].attn.attention.q_proj.bias = torch.nn.Parameter(torch.zeros(64))  # a part it does not model
    with pytest.raises(ArtifactError, match=r"does not use 1 weights of this checkpoint "
                                            r"\(transformer.h.1.attn.attention.q_proj.bias...\)"):
        build(model, fg.StateDict.of_model(model, "GPT2"), fg.GraphBuilder(np.float32))
