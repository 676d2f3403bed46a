"""OPT's fused decode step (`--fused-decode` on frameworks, OPT/fused_decode.py) gives HF `generate`'s tokens, token
for token in fp32: opt-offline, a tiny random OPT with non-trivial layer norms and biases (pre-norm), and a tiny
random opt-350m-shaped OPT (post-norm, a narrower embedding through project_in / project_out, no final layer norm);
greedy and beam search, a left-padded batch of three prompt lengths, EOS mid-way, a second generation on the same
buffers; compiled once on the CPU. Configs the step does not reproduce refuse the flag in one line, exit 2.

With HARNESS_TEST_DEVICE=cuda the parity cases also run the step from a CUDA graph, eager and compiled.
"""
import os

import pytest

from NNDF import registry
from NNDF.actions.common import backend_steps, encode
from NNDF.errors import UsageError

from test_fused_decode import (MODES, PROMPTS, _check_kernels, _check_parity, _fused_tokens, _hf_tokens, _mode_id,
                               _run)

DEVICE = os.environ.get("HARNESS_TEST_DEVICE", "cpu")


def _tiny_dir(root, **config):
    """A random 2-layer OPT folder (the offline byte-level BPE tokenizer) with these config fields: weights of std
    0.3 and every layer norm's gain and bias and every product's bias drawn at random too (HF's ones and zeros
    would hide a norm or bias applied in the wrong place)."""
    import torch
    from transformers import AutoTokenizer, OPTConfig, OPTForCausalLM

    from NNDF.offline import SHARED_TOKENIZERS

    tok = AutoTokenizer.from_pretrained(SHARED_TOKENIZERS / "byte-bpe", local_files_only=True)
    eos = tok.eos_token_id
    torch.manual_seed(0)
    model = OPTForCausalLM(OPTConfig(vocab_size=len(tok), max_position_embeddings=128, hidden_size=32,
                                     num_attention_heads=4, ffn_dim=64, num_hidden_layers=2, init_std=0.3,
                                     bos_token_id=eos, eos_token_id=eos, pad_token_id=eos, **config))
    with torch.no_grad():
        for name, tensor in model.named_parameters():
            if tensor.dim() == 1:  # layer norms (gain about 1) and biases
                tensor.copy_(torch.randn_like(tensor) * 0.3 + (1.0 if name.endswith("layer_norm.weight") else 0.0))
    model.save_pretrained(root, safe_serialization=True)
    tok.save_pretrained(root)
    return str(root)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return {"pre-norm": _tiny_dir(tmp_path_factory.mktemp("tiny-opt")),
            "post-norm": _tiny_dir(tmp_path_factory.mktemp("tiny-opt-350m"), do_layer_norm_before=False,
                                   word_embed_proj_dim=16)}


@pytest.mark.parametrize("mode", MODES, ids=_mode_id)
@pytest.mark.parametrize("model", ["opt-offline", "pre-norm", "post-norm"])
def test_fused_step_matches_hf_generate(model, mode, tiny, workdir):
    run = _run(workdir, variant="opt-offline", torch_dir=tiny.get(model), family="OPT", graph=mode[0],
               compiled=mode[1])
    with backend_steps(run, "frameworks") as (_, steps):
        assert type(steps.fused).__name__ == "FusedOPTStep"
        if model == "post-norm":  # opt-350m's shape: post-norm, project_in / project_out, no final layer norm
            fused = steps.fused
            assert not fused.pre_norm and fused.final_norm is None and fused.project_in is not None
        _check_parity(run, steps)


@pytest.mark.parametrize("model", ["post-norm", "pre-norm"])
def test_step_on_our_kernels(model, tiny, workdir, monkeypatch):
    """OPT's step on our Triton GEMV and attention kernels (the default on CUDA) gives HF generate's tokens: the
    post-norm model (project_in / project_out through the GEMV too), and the pre-norm model, whose norms, ReLU,
    residual adds and K/V writes run inside the GEMV (`gemv_fusion`) or around it."""
    run = _run(workdir, variant="opt-offline", torch_dir=tiny[model], family="OPT")
    with backend_steps(run, "frameworks") as (_, steps):
        _check_kernels(run, steps, monkeypatch, fusion=model == "pre-norm")


@pytest.mark.skipif(DEVICE == "cuda", reason="on CUDA the compiled step runs in the parity tests")
def test_compiled_step_on_cpu(tiny, workdir):
    """torch.compile of the three step functions on the CPU (3 rows: the reduction form of the products; 9 beam
    rows: F.linear), on the pre-norm model with random norms and biases."""
    run = _run(workdir, variant="opt-offline", torch_dir=tiny["pre-norm"], family="OPT", compiled=True)
    with backend_steps(run, "frameworks") as (_, steps):
        assert steps.fused.compiled and steps.fused.settings.reduces(3, True, steps.fused.width)
        prompt, eos = encode(run, PROMPTS), run.tokenizer.eos_token_id
        for beams in (1, 3):
            assert _fused_tokens(run, steps, prompt, beams, eos) == _hf_tokens(run, prompt, beams, eos)


@pytest.mark.skipif(DEVICE == "cuda", reason="refusals are checked on the CPU")
def test_unsupported_activation_is_refused(tmp_path, workdir):
    """In process (a UsageError is the CLI's one line, exit 2: tests/test_llama_fused.py runs that path)."""
    folder = _tiny_dir(tmp_path / "gelu", activation_function="gelu")
    with pytest.raises(UsageError) as refused:
        with backend_steps(_run(workdir, variant="opt-offline", torch_dir=folder, family="OPT"), "frameworks"):
            pass
    assert str(refused.value) == ("--fused-decode: activation 'gelu' is not the ReLU the fused step implements; "
                                  "drop --fused-decode")


def test_every_model_type_of_the_family_has_the_step():
    from OPT.fused_decode import MODEL_TYPES

    family = registry.family("OPT")
    assert set(family.model_types) == set(MODEL_TYPES) == set(registry.facts(family, "frameworks").fused)
