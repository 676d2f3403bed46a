"""Token-for-token parity with HF `generate` (CPU, fp32) for every offline variant of every family, on every
backend, with and without KV cache: greedy and beam search, padded batches, batch == each row alone (every row
greedily, the most padded row with beams), EOS. HF's rows come from the session's `hf_rows` (tests/conftest.py),
shared with test_seq2seq_static.py."""
import importlib.util
import os
from contextlib import contextmanager

import pytest

from NNDF import registry
from NNDF.actions.common import backend_steps, encode, generate_prompt
from NNDF.context import make_context
from NNDF.generation import GenerationConfig
from NNDF.backends.trt.options import TRTOptions
from NNDF.options import ModelOptions

from conftest import offline_variants
from NNDF.tasks import GenerativeTask

DEVICE = os.environ.get("HARNESS_TEST_DEVICE", "cpu")  # tools/bench/cuda_check.sh runs this file on CUDA too
PROMPTS = ["The for statement is used to", "A", "Names refer to objects and the"]
NEW = 10
ALONE_WITH_BEAMS = 1  # the row whose unpadded beam search is compared with its padded batch row ("A")


def _hf(model, prompt, beams, use_cache, eos, pad):
    """HF generate on the same inputs (the decoder prompt, or the encoder's inputs); new ids per row up to EOS."""
    inputs = prompt.encoder or {"input_ids": prompt.input_ids, "attention_mask": prompt.attention_mask}
    inputs = {k: v.to(model.device) for k, v in inputs.items()}
    out = model.generate(**inputs, max_new_tokens=NEW, do_sample=False, num_beams=beams, use_cache=use_cache,
                         eos_token_id=eos, pad_token_id=pad)
    rows = []
    for r in range(prompt.batch):
        new = out[r, prompt.input_ids.shape[1]:].tolist()  # encoder-decoder: HF's output starts with the start token
        rows.append(new[: new.index(eos) + 1] if eos in new else new)
    return rows


def _ours(run, steps, prompt, beams, eos, pad):
    config = GenerationConfig(max_new_tokens=NEW, num_beams=beams, eos_token_id=eos, pad_token_id=pad,
                              forced_bos_token_id=run.source.generation.forced_bos_token_id)
    out = generate_prompt(steps, prompt, config)
    return [out.new_tokens(r, eos) for r in range(prompt.batch)]


# text-in families; image-to-text parity (captions of images) is in test_vision2seq.py
TEXT_VARIANTS = [v for v in offline_variants(GenerativeTask) if registry.family(v[0]).kind != "vision2seq"]


# without the KV cache each step is the model's own forward over the whole sequence: each family's default variant
# covers it; the other variants (architectures of the family) run with the cache
CASES = [(v, kv) for v in TEXT_VARIANTS for kv in (True, False) if kv or v[1] == registry.family(v[0]).default_variant]


@pytest.mark.parametrize("variant,use_cache", CASES, ids=lambda p: f"{p[0]}-{p[1]}" if isinstance(p, tuple)
                         else ("kv" if p else "nokv"))
@pytest.mark.parametrize("backend", ["frameworks", "onnxrt", "trt"])
def test_generate_parity(variant, backend, use_cache, workdir, hf_rows):
    family, name = variant
    _skip_without_tensorrt(backend)
    trt = TRTOptions(dynamic_batch=True, min_dynamic_batch=1, max_dynamic_batch=9)  # rows: 1 .. 3 prompts x 3 beams
    run = make_context(registry.family(family), ModelOptions(variant=name, working_dir=str(workdir), batch_size=3,
                                                             use_cache=use_cache, use_mask=True, device=DEVICE), trt)
    prompt = encode(run, PROMPTS)
    padded = prompt.encoder["attention_mask"] if prompt.encoder else prompt.attention_mask
    assert not padded.all(), "the prompts must need padding"
    model, tok = run.torch_model(), run.tokenizer
    pad = tok.pad_token_id
    hf = lambda beams, eos: hf_rows(variant, PROMPTS, model, prompt, beams, use_cache, eos, pad)  # noqa: E731
    with _steps_or_skip(run, backend) as steps:
        for beams in (1, 3):
            expected = hf(beams, tok.eos_token_id)
            assert _ours(run, steps, prompt, beams, tok.eos_token_id, pad) == expected, f"beams={beams}"
            # each row alone, unpadded, gives the same tokens: every row greedily; with beams the shortest row
            # (the most padded in the batch; one row alone runs the same one-input beam expansion as any other)
            for r in range(len(PROMPTS)) if beams == 1 else [ALONE_WITH_BEAMS]:
                alone = _ours(run, steps, encode(run, PROMPTS[r:r + 1]), beams, tok.eos_token_id, pad)
                assert alone == [expected[r]], f"row {r} alone differs from its padded batch row (beams={beams})"
        # EOS mid-generation: make a token the greedy search emits early the EOS, so rows stop at different steps
        eos = hf(1, None)[0][3]
        for beams in (1, 3):
            expected = hf(beams, eos)
            assert beams > 1 or eos in expected[0]
            assert _ours(run, steps, prompt, beams, eos, pad) == expected, f"EOS case, beams={beams}"


def _skip_without_tensorrt(backend: str) -> None:
    if backend != "trt":
        return
    if DEVICE != "cuda":
        pytest.skip("trt runs on CUDA: set HARNESS_TEST_DEVICE=cuda on a GPU machine with TensorRT")
    if not any(importlib.util.find_spec(m) for m in ("tensorrt", "tensorrt_rtx")):
        pytest.skip("TensorRT is not installed (pip install tensorrt)")


@contextmanager
def _steps_or_skip(run, backend):
    from NNDF.backends.trt.engine import EngineRefused

    try:
        with backend_steps(run, backend) as (_, steps):
            yield steps
    except EngineRefused as exc:  # e.g. TensorRT-RTX on Hopper: engines build but cannot run here
        pytest.skip(f"engine execution impossible on this GPU: {exc}")


def test_every_family_has_an_offline_variant():
    for fam in registry.families().values():
        assert fam.variant(fam.default_variant).offline, fam.name
