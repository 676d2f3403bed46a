"""`onnxrt --fused-decode` for OPT: the fused decode graph (GroupQueryAttention writing a shared past/present buffer,
SkipLayerNormalization, ReLU; OPT/fused_onnx.py).

On the CPU (fp32): generation gives HF `generate`'s tokens, token for token, for opt-offline and two tiny random
models with what the variant lacks (every weight random, layer norms too): opt-350m's layout (post-norm, project_in /
project_out, a word embedding narrower than the hidden size), and a pre-norm model without the final layer norm,
biases or affine layer norms, with an untied head: greedy, 3 beams, EOS mid-way, a second generation on the same
buffers; a left-padded batch gives HF `generate`'s tokens (positions from each row's own length); the graph has one
attention op per layer and no Reshape / Transpose / ScatterND, built from the checkpoint files (the tied head by
the embedding's name). Other activations (CLI: one line, exit 2), head sizes the op cannot run and a checkpoint with
weights the graph leaves out are refused by message.
"""
import json
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

from conftest import cli_in_process, random_model
from test_fused_decode_ort import _hf as hf_tokens, _tokens as fused_tokens

NEW, ROWS, PROMPT = 10, 3, 8
TINY = ["opt-postnorm", "opt-bare"]


def _tiny_configs(tok) -> dict:
    """Random models (head size 16) with what opt-offline lacks."""
    from transformers import OPTConfig

    from NNDF.offline import decoder_token_ids

    shape = dict(hidden_size=64, num_attention_heads=4, ffn_dim=96, num_hidden_layers=2, max_position_embeddings=64,
                 **decoder_token_ids(tok))
    return {
        "opt-postnorm": OPTConfig(**shape, do_layer_norm_before=False, word_embed_proj_dim=32),  # opt-350m's
        "opt-bare": OPTConfig(**shape, word_embed_proj_dim=64, _remove_final_layer_norm=True, enable_bias=False,
                              layer_norm_elementwise_affine=False, tie_word_embeddings=False),
    }


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, str]:
    """name -> model folder; every weight random (biases and norms too: `conftest.random_model`)."""
    from transformers import AutoTokenizer

    from OPT.config import BPE_TOKENIZER_DIR

    tok = AutoTokenizer.from_pretrained(BPE_TOKENIZER_DIR, local_files_only=True)
    return {name: random_model(config, tmp_path_factory.mktemp("models") / name, seed, BPE_TOKENIZER_DIR)
            for seed, (name, config) in enumerate(_tiny_configs(tok).items())}


def _run(workdir, model: dict):
    options = dict(working_dir=str(workdir), use_cache=True, use_mask=True, device="cpu", fp16=False,
                   static_cache=True, fused_decode=True)
    return make_context(registry.family("OPT"), ModelOptions(**options, **model))


def _model(name: str, tiny: dict) -> dict:
    return {"torch_dir": tiny[name]} if name in TINY else {"variant": name}


def _prompt(vocab: int):
    ids = torch.randint(0, vocab - 1, (ROWS, PROMPT), generator=torch.Generator().manual_seed(1))
    return ids, torch.ones_like(ids)


def _tokens(steps, ids, mask, beams: int, eos: int | None, pad: int) -> list[list[int]]:
    return fused_tokens(steps, ids, mask, beams, eos, pad, new=NEW)


def _hf(run, ids, mask, beams: int, eos: int | None, pad: int) -> list[list[int]]:
    return hf_tokens(run, ids, mask, beams, eos, pad, new=NEW)


@pytest.mark.parametrize("name", ["opt-offline"] + TINY)
def test_fused_graph_gives_hf_generate_tokens(name, tiny, workdir):
    run = _run(workdir, _model(name, tiny))
    config = run.source.config
    ids, mask = _prompt(config.vocab_size)
    pad = run.tokenizer.pad_token_id
    with backend_steps(run, "onnxrt") as (backend, steps):
        assert isinstance(backend.onnx, FusedDecodeOnnx)
        assert backend.export_max_diff() < 1e-3  # validated against PyTorch when built
        assert backend.onnx.record["built_from"] == "checkpoint files"  # tied head: the embedding's name
        nodes = backend.onnx.record["nodes"]
        assert nodes["GroupQueryAttention"] == config.num_hidden_layers
        # per layer: 4 products, attention, 2 skip norms, ReLU (+ the bias adds); 2 gathers, a norm or an add,
        # project_in / project_out, the head and the Slice of its positions
        assert not {"Reshape", "Transpose", "ScatterND"} & set(nodes) and nodes["Slice"] == 1
        assert sum(nodes.values()) <= 10 * config.num_hidden_layers + 7
        for beams in (1, 3):
            expected = _hf(run, ids, mask, beams, None, pad)
            assert _tokens(steps, ids, mask, beams, None, pad) == expected, f"beams={beams}"
        early = expected[0][2]  # a token the search emits early becomes the EOS: rows stop at different steps
        for beams in (1, 3):
            assert _tokens(steps, ids, mask, beams, early, pad) == _hf(run, ids, mask, beams, early, pad)
        if name == "opt-postnorm":  # left-padded rows: HF's positions come from the mask's cumsum
            mask[0, :2], mask[2, :5] = 0, 0
            for beams in (1, 3):
                assert _tokens(steps, ids, mask, beams, None, pad) == _hf(run, ids, mask, beams, None, pad), beams


def test_refusals(tiny):
    from transformers import AutoConfig, AutoModelForCausalLM, OPTConfig

    from CausalLM import fused_graph as fg
    from NNDF.errors import ArtifactError
    from OPT.fused_onnx import build, refusal

    assert refusal(AutoConfig.from_pretrained(tiny["opt-postnorm"])) is None
    assert refusal(OPTConfig(hidden_size=4096, num_attention_heads=32, ffn_dim=16384)) is None  # opt-6.7b
    assert refusal(OPTConfig(activation_function="gelu")) == \
        "onnxrt --fused-decode runs OPT's MLP with ReLU; this model's activation is 'gelu'"
    assert "this model's is 12" in refusal(OPTConfig(hidden_size=48, num_attention_heads=4))
    model = AutoModelForCausalLM.from_pretrained(tiny["opt-postnorm"])
    model.model.decoder.layers[1].extra = torch.nn.Parameter(torch.ones(4))  # a part the graph does not model
    with pytest.raises(ArtifactError, match=r"does not use 1 weights of this checkpoint "
                                            r"\(model.decoder.layers.1.extra...\)"):
        build(model, fg.StateDict.of_model(model, "OPT"), fg.GraphBuilder(np.float32))
    family = registry.family("OPT")
    assert registry.backend(family, "onnxrt").fused_decode_types() == ("opt",)
    with pytest.raises(UsageError, match="the trt backend has no fused decode step for model type 'opt'"):
        registry.backend(family, "trt").check_fused_decode("opt")


def test_cli_refusal(tiny, workdir, capsys):
    folder = tiny["opt-bare"] + "-gelu"  # refused in one line before anything is built
    shutil.copytree(tiny["opt-bare"], folder, dirs_exist_ok=True)
    config = json.loads((Path(folder) / "config.json").read_text())
    config["activation_function"] = "gelu"
    (Path(folder) / "config.json").write_text(json.dumps(config))
    proc = cli_in_process(capsys, "generate", "OPT", "onnxrt", "--torch-dir", folder, "--use-cache", "--static-cache",
                          "--fused-decode", "--prompt", "Hello", "--max-new-tokens", "4", "-wd", str(workdir))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and lines == ["error: onnxrt --fused-decode runs OPT's MLP with ReLU; this model's "
                                              "activation is 'gelu'"], proc.stderr
