"""BLOOM's fused decode step (`--fused-decode` on frameworks, BLOOM/fused_decode.py) gives HF `generate`'s tokens,
token for token in fp32: bloom-offline and tiny random BLOOMs with 6 heads (not a power of two: HF's slopes take
the interleaved extra heads) and every layer norm and bias drawn at random, one of them with
apply_residual_connection_post_layernorm; greedy and beam search, a left-padded batch of three prompt lengths
(ALiBi over each row's own positions), EOS mid-way, a second generation on the same buffers; compiled once on the
CPU. A 150-column left-padded prompt and one-token steps give HF's logits; the step's attention bias equals HF's
alibi up to a constant per query.

With HARNESS_TEST_DEVICE=cuda the parity cases also run the step from a CUDA graph, eager and compiled.
"""
import os
import shutil

import pytest
import torch

from NNDF import registry
from NNDF.actions.common import backend_steps, encode

from test_fused_decode import (MODES, PROMPTS, _check_kernels, _check_parity, _fused_tokens, _hf_tokens, _mode_id,
                               _run)

DEVICE = os.environ.get("HARNESS_TEST_DEVICE", "cpu")
TINY = ("odd-heads", "post-norm")


def _tiny_dir(root, seed: int, **config) -> str:
    """A random 2-layer BLOOM folder (the offline byte-level BPE tokenizer), 6 heads of size 20: matrices of std
    0.3, every layer norm's gain and bias and every product's bias drawn at random too (HF's ones and zeros would
    hide a norm or bias applied in the wrong place)."""
    from transformers import AutoTokenizer, BloomConfig, BloomForCausalLM

    from BLOOM.config import BPE_TOKENIZER_DIR
    from NNDF.offline import decoder_token_ids, redraw_weights

    tok = AutoTokenizer.from_pretrained(BPE_TOKENIZER_DIR, local_files_only=True)
    model = BloomForCausalLM(BloomConfig(n_layer=2, hidden_size=120, n_head=6, **decoder_token_ids(tok), **config))
    redraw_weights(model, seed, 0.3)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() == 1:  # layer norms (gain about 1) and biases
                gain = 1.0 if name.endswith("layernorm.weight") or name.endswith("ln_f.weight") else 0.0
                param.copy_(torch.randn(param.shape, generator=generator) * 0.3 + gain)
    model.save_pretrained(root)
    for path in BPE_TOKENIZER_DIR.glob("*.json"):
        shutil.copyfile(path, root / path.name)
    return str(root)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return {"odd-heads": _tiny_dir(tmp_path_factory.mktemp("tiny-bloom"), 0),
            "post-norm": _tiny_dir(tmp_path_factory.mktemp("tiny-bloom-post"), 1,
                                   apply_residual_connection_post_layernorm=True)}


@pytest.mark.parametrize("mode", MODES, ids=_mode_id)
@pytest.mark.parametrize("model", ["bloom-offline", *TINY])
def test_fused_step_matches_hf_generate(model, mode, tiny, workdir):
    run = _run(workdir, variant="bloom-offline", torch_dir=tiny.get(model), family="BLOOM", graph=mode[0],
               compiled=mode[1])
    with backend_steps(run, "frameworks") as (_, steps):
        assert type(steps.fused).__name__ == "FusedBloomStep"
        assert steps.fused.post == (model == "post-norm")
        _check_parity(run, steps)


def test_step_on_our_kernels(tiny, workdir, monkeypatch):
    """BLOOM's step on our Triton GEMV and attention kernels (the default on CUDA; ALiBi inside the attention
    kernels) gives HF generate's tokens, on the model with an odd head count."""
    run = _run(workdir, variant="bloom-offline", torch_dir=tiny["odd-heads"], family="BLOOM")
    with backend_steps(run, "frameworks") as (_, steps):
        _check_kernels(run, steps, monkeypatch)


@pytest.mark.skipif(DEVICE == "cuda", reason="on CUDA the compiled step runs in the parity tests")
def test_compiled_step_on_cpu(tiny, workdir):
    """torch.compile of the three step functions on the CPU, greedy (3 rows: the reduction form of the products),
    on the odd-head model with random norms and biases."""
    run = _run(workdir, variant="bloom-offline", torch_dir=tiny["odd-heads"], family="BLOOM", compiled=True)
    with backend_steps(run, "frameworks") as (_, steps):
        assert steps.fused.compiled and steps.fused.settings.reduces(3, True, steps.fused.width)
        prompt, eos = encode(run, PROMPTS), run.tokenizer.eos_token_id
        assert _fused_tokens(run, steps, prompt, 1, eos) == _hf_tokens(run, prompt, 1, eos)


def test_long_prompt_logits_match_hf(tiny):
    """A 150-column prompt (one row left-padded by 40) and 4 one-token steps give the logits of HF's forward over
    the whole sequence: ALiBi far from position 0, the step's relative bias against HF's absolute one."""
    from transformers import BloomForCausalLM

    from BLOOM.fused_decode import FusedBloomStep
    from CausalLM.torch_steps import TorchSteps

    model = BloomForCausalLM.from_pretrained(tiny["odd-heads"]).eval()
    steps = TorchSteps(model, True, static_cache=True, fused=FusedBloomStep(model))
    ids = torch.randint(0, 1000, (2, 154), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    mask[1, :40] = 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.inference_mode():
        expected = model(input_ids=ids, attention_mask=mask).logits  # [2, 154, V]
        slot = steps.new_cache(2, 160)
        logits, slot = steps.forward(ids[:, :150], mask[:, :150], positions[:, :150], slot)
        got = [logits[:, -1]]
        for column in range(150, 153):
            logits, slot = steps.forward(ids[:, column:column + 1], mask[:, :column + 1],
                                         positions[:, column:column + 1], slot)
            got.append(logits[:, -1])
    assert torch.allclose(torch.stack(got, 1), expected[:, 149:153], atol=1e-4)


def test_attention_bias_is_hf_alibi_up_to_a_constant_per_query():
    """The one-token step's ALiBi (slope_h x the relative positions embed_step gives) minus HF's alibi
    (build_alibi_tensor over a left-padded mask) is the same for every unpadded column of a row and head; padded
    and future columns are not attended to."""
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    from BLOOM.fused_decode import alibi_slopes, embed_step

    heads, length, write = 6, 9, 6
    mask = torch.ones(3, length, dtype=torch.long)
    mask[1, :2] = 0
    mask[2, :5] = 0
    norm = (torch.ones(4), torch.zeros(4))
    _, valid, offsets = embed_step(torch.zeros(3, 1, dtype=torch.long), mask, torch.tensor([write]),
                                   torch.randn(5, 4), norm, 1e-5)
    bias = alibi_slopes(heads, "cpu")[None, :, None] * offsets[:, None, :]  # [R, H, L]
    hf = build_alibi_tensor(mask[:, : write + 1], heads, torch.float32).reshape(3, heads, write + 1)
    for row in range(3):
        kept = mask[row, : write + 1].bool()
        assert torch.equal(valid[row, : write + 1], kept) and not valid[row, write + 1:].any()
        shift = bias[row, :, : write + 1][:, kept] - hf[row][:, kept]  # [H, kept]
        assert torch.allclose(shift, shift[:, :1].expand_as(shift), atol=1e-6)


def test_every_model_type_of_the_family_has_the_step():
    from BLOOM.fused_decode import MODEL_TYPES

    family = registry.family("BLOOM")
    assert set(family.model_types) == set(MODEL_TYPES) == set(registry.facts(family, "frameworks").fused)
