"""Beam search's bookkeeping as one graph (`NNDF.generation.BEAMS_IN_GRAPH`, `NNDF.beams.BeamGraph`): each step's
EOS masks, log-softmax and hypothesis update run at fixed addresses on the device's own step counter (on CUDA
captured once and replayed; on the CPU the same function runs as it is). HF `generate`'s beams, token for token,
through the shared loop, and a second generation reusing the graph gives the same; a generation whose processors do
more than mask EOS keeps the loop's own bookkeeping."""
import os

import pytest

from NNDF import generation, registry
from NNDF.actions.common import backend_steps, encode, generate_prompt
from NNDF.beams import BeamGraph
from NNDF.context import make_context
from NNDF.generation import GenerationConfig
from NNDF.options import ModelOptions
from NNDF.sampling import SamplingConfig

from conftest import generate_twice
from test_parity import NEW

DEVICE = os.environ.get("HARNESS_TEST_DEVICE", "cpu")
PROMPTS = {"T5": ["translate English to German: The house is wonderful.", "summarize: A", "Names refer"],
           "GPT2": ["The for statement is used to", "A", "Names refer to objects and the"]}
# (family, variant, backend, options): the graph serves any backend's beam search
CASES = [("T5", "t5-offline", "frameworks", dict(static_cache=True)), ("GPT2", "gpt2-offline", "frameworks", {}),
         ("GPT2", "gpt2-offline", "onnxrt", {})]


def _counted(monkeypatch) -> list:
    runs = []
    real = BeamGraph.run
    monkeypatch.setattr(BeamGraph, "run", lambda self, *a: runs.append(1) or real(self, *a))
    return runs


def _hf(model, prompt, beams, eos, pad, **settings):
    inputs = prompt.encoder or {"input_ids": prompt.input_ids, "attention_mask": prompt.attention_mask}
    out = model.generate(**{k: v.to(model.device) for k, v in inputs.items()}, max_new_tokens=NEW, do_sample=False,
                         num_beams=beams, eos_token_id=eos, pad_token_id=pad, **settings)
    rows = [out[r, prompt.input_ids.shape[1]:].tolist() for r in range(prompt.batch)]
    return [row[: row.index(eos) + 1] if eos in row else row for row in rows]


@pytest.mark.parametrize("family, variant, backend, options", CASES, ids=lambda v: v if isinstance(v, str) else "")
def test_beam_graph_gives_hf_beams(family, variant, backend, options, workdir, monkeypatch):
    """Padded batches, 3 beams: HF's tokens with the default search settings, with early_stopping=True, and with a
    length penalty and min_new_tokens where the EOS is a token the beams pick early (masked on the device's
    counter while forbidden); each generated twice."""
    if DEVICE == "cuda" and backend == "onnxrt":
        import onnxruntime

        if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
            pytest.skip("onnxrt on CUDA needs onnxruntime-gpu")
    monkeypatch.setattr(generation, "BEAMS_IN_GRAPH", {DEVICE})
    runs = _counted(monkeypatch)
    run = make_context(registry.family(family), ModelOptions(variant=variant, working_dir=str(workdir), device=DEVICE,
                                                             use_cache=True, use_mask=True, batch_size=3, **options))
    prompt = encode(run, PROMPTS[family])
    model, tok = run.torch_model(), run.tokenizer
    eos, pad = tok.eos_token_id, tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    with backend_steps(run, registry.backend(run.family, backend)) as (_, steps):
        for settings in ({}, dict(early_stopping=True)):
            expected = _hf(model, prompt, 3, eos, pad, **settings)
            assert generate_twice(run, steps, prompt, NEW, 3, eos, **settings) == expected, settings
        free = _hf(model, prompt, 3, None, pad)[0]  # row 0's best beam without an EOS
        for step in (0, 3):  # its token at `step` becomes the EOS, forbidden up to there (no length penalty: the
            settings = dict(length_penalty=0.0, min_new_tokens=step + 1)  # short hypothesis would win if allowed)
            expected = _hf(model, prompt, 3, free[step], pad, **settings)
            assert generate_twice(run, steps, prompt, NEW, 3, free[step], **settings) == expected, settings
    assert runs  # the graph ran


def test_other_processors_keep_the_loops_bookkeeping(workdir, monkeypatch):
    """A repetition penalty is not an EOS mask: the loop's own bookkeeping runs, the graph never."""
    monkeypatch.setattr(generation, "BEAMS_IN_GRAPH", {DEVICE})
    runs = _counted(monkeypatch)
    run = make_context(registry.family("GPT2"), ModelOptions(variant="gpt2-offline", working_dir=str(workdir),
                                                             device=DEVICE, use_cache=True))
    prompt = encode(run, PROMPTS["GPT2"][:1])
    config = GenerationConfig(max_new_tokens=NEW, num_beams=2, eos_token_id=run.tokenizer.eos_token_id,
                              pad_token_id=run.tokenizer.eos_token_id, sampling=SamplingConfig(repetition_penalty=1.3))
    with backend_steps(run, registry.backend(run.family, "frameworks")) as (_, steps):
        generate_prompt(steps, prompt, config)
    assert not runs
