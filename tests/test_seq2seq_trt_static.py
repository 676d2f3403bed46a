"""`trt --static-cache` for encoder-decoders without TensorRT: the static export (the family's static-cache step as
the decoder graph) against HF on ONNX Runtime, the engine profiles derived for it, and `Seq2SeqTrtStaticSteps`'
bookkeeping with ONNX Runtime standing in for the engines (nothing here is a TensorRT result)."""
import onnx
import pytest
import torch

from NNDF import registry
from NNDF.actions.common import encode
from NNDF.backends.trt.options import TRTOptions
from NNDF.backends.trt.profiles import engine_shapes
from NNDF.context import make_context
from NNDF.options import ModelOptions
from Seq2Seq.static_export import validate_static
from Seq2Seq.trt import seq2seq_profiles
from Seq2Seq.trt_static_steps import Seq2SeqTrtStaticSteps

from conftest import generate_twice
from test_parity import NEW, _hf
from test_trt import OrtIO

PROMPTS = ["translate English to German: The house is wonderful.", "summarize: A", "Names refer to objects"]
# T5 and mBART (pre-norm, scaled embeddings, a forced first token): the export wraps the family's own step, whose
# BART post-norm path is compared with HF in test_bart_fused.py and test_seq2seq_static.py
VARIANTS = [("T5", "t5-offline"), ("BART", "mbart-offline")]


def _bound(run):
    """The run with its bound backends, as `open_run` makes it (the static export asks frameworks for the step)."""
    run.bind = lambda name: registry.backend(run.family, name)
    return run


def _run(family, variant, workdir):
    return _bound(make_context(registry.family(family), ModelOptions(variant=variant, working_dir=str(workdir),
                                                                     static_cache=True, use_mask=True, device="cpu")))


def _static_paths(run):
    """The static export as the trt backend takes it (exported and validated once per session's workdir)."""
    backend = registry.backend(run.family, "trt")
    paths, _ = backend.onnx.paths(run)
    return backend, paths


@pytest.mark.parametrize("family,variant", VARIANTS)
def test_static_export_matches_pytorch(family, variant, workdir):
    """The static decoder graph is standard ONNX (no ONNX Runtime contrib ops: TensorRT parses it), one token
    per pass over full-length buffers; on ONNX Runtime, four passes carrying present -> past give HF's logits."""
    run = _run(family, variant, workdir)
    backend, paths = _static_paths(run)
    assert paths["decoder"].parent.name == "seq2seq-fp32-static" and set(paths) == {"encoder", "cache_generator",
                                                                                     "decoder"}
    assert backend.export_max_diff() < 1e-4  # measured by the export's own validation
    graph = onnx.load(str(paths["decoder"]), load_external_data=False).graph
    assert {node.domain for node in graph.node} <= {"", "ai.onnx"}
    assert "ScatterND" in {node.op_type for node in graph.node}  # the cache write inside the graph
    dims = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in list(graph.input) + list(graph.output)}
    assert dims["input_ids"] == ["batch", 1] and dims["cache_position"] == [1]
    assert dims["past.0.key"][::2] == ["batch", "max_length"] == dims["present.0.value"][::2]
    assert dims["cross.0.key"][::2] == ["batch", "encoder_seq"]
    model = run.torch_model()
    assert validate_static(model, paths, "cpu", backend.spec, False) < 1e-4  # HF itself, recomputed here


def test_static_export_traces_plain_ops_whatever_the_default(tmp_path, monkeypatch):
    """The export traces the step in plain torch ops even where the steps' default runs our Triton kernels (CUDA;
    here the default made to run them everywhere): those are not ONNX."""
    from dataclasses import replace

    from Seq2Seq import fused_step

    monkeypatch.setattr(fused_step, "SEQ2SEQ_SETTINGS", replace(fused_step.SEQ2SEQ_SETTINGS, kernels_everywhere=True))
    run = _run("T5", "t5-offline", tmp_path)
    backend, paths = _static_paths(run)
    graph = onnx.load(str(paths["decoder"]), load_external_data=False).graph
    assert {node.domain for node in graph.node} <= {"", "ai.onnx"}
    assert backend.export_max_diff() < 1e-4


def test_static_profiles_fix_full_length_buffers():
    """Both decoder profiles take one token; the self-attention buffers range up to the generation's full length
    (start token + new tokens) for the encoder's rows (first) and the beam rows (step)."""
    class Cfg:
        max_position_embeddings = 512

    shapes = engine_shapes(Cfg(), ModelOptions(batch_size=2, num_beams=3, static_cache=True),
                           TRTOptions(input_profile_max_len=64, output_profile_max_len=32))
    dims = {"encoder": {"input_ids": ("batch", "encoder_seq"), "attention_mask": ("batch", "encoder_seq")},
            "cache_generator": {"encoder_hidden_states": ("batch", "encoder_seq", 512)},
            "decoder": {"input_ids": ("batch", 1), "cache_position": (1,),
                        "encoder_attention_mask": ("batch", "encoder_seq"),
                        "past.0.key": ("batch", 8, "max_length", 64), "cross.0.key": ("batch", 8, "encoder_seq", 64)}}
    profiles = seq2seq_profiles(shapes, dims, use_cache=True, static=True)
    (encoder,), (generator,), (first, step) = profiles["encoder"], profiles["cache_generator"], profiles["decoder"]
    assert encoder.shapes["input_ids"] == ((2, 1), (2, 32), (2, 64))
    assert generator.shapes["encoder_hidden_states"] == ((2, 1, 512), (2, 32, 512), (2, 64, 512))
    assert first.shapes["input_ids"] == ((2, 1),) * 3 and step.shapes["input_ids"] == ((6, 1),) * 3
    assert "cache_position" not in first.shapes and "cache_position" not in step.shapes  # fixed [1]: no profile
    assert first.shapes["past.0.key"] == ((2, 8, 1, 64), (2, 8, 17, 64), (2, 8, 33, 64))  # start token + 32
    assert step.shapes["past.0.key"] == ((6, 8, 1, 64), (6, 8, 17, 64), (6, 8, 33, 64))
    assert step.shapes["cross.0.key"] == ((6, 8, 1, 64), (6, 8, 32, 64), (6, 8, 64, 64))
    assert step.shapes["encoder_attention_mask"] == ((6, 1), (6, 32), (6, 64))


@pytest.mark.parametrize("family,variant", VARIANTS)
def test_static_steps_bookkeeping_gives_hf_tokens(family, variant, workdir):
    """Seq2SeqTrtStaticSteps through the shared loop (greedy and 3 beams, padded encoder batch, EOS mid-way, a
    second generation on the same buffers), ONNX Runtime executing each bound engine call from the bound memory,
    equals HF generate: full-length buffers, write positions, ping-pong swaps, cross-attention cache and beam
    reordering are right."""
    run = _run(family, variant, workdir)
    _, paths = _static_paths(run)
    prompt = encode(run, PROMPTS)
    assert prompt.encoder["attention_mask"].min() == 0  # a padded encoder batch
    model, tok = run.torch_model(), run.tokenizer
    eos, pad, forced = tok.eos_token_id, tok.pad_token_id, run.source.generation.forced_bos_token_id
    early = _hf(model, prompt, 1, True, None, pad)[0][3]  # a token greedy emits early becomes the EOS
    for beams, stop in ((1, eos), (3, eos), (1, early), (3, early)):
        ios = {part: OrtIO(path) for part, path in paths.items()}
        steps = Seq2SeqTrtStaticSteps(ios, "cpu", max_rows=3 * beams, max_input=prompt.encoder["input_ids"].shape[1],
                                      max_length=1 + NEW + 2)
        ours = generate_twice(run, steps, prompt, NEW, beams, stop, forced_bos_token_id=forced)
        assert ours == _hf(model, prompt, beams, True, stop, pad), (beams, stop)
        decoder = ios["decoder"]
        assert decoder.profiles == [0, 1, 0, 1]  # per generation: the first pass on the encoder's rows, then steps
        first = [i for i, key in enumerate(decoder.graph_keys) if key is None]
        assert len(first) == 2 and len(set(decoder.graph_keys) - {None}) <= 2  # a graph per buffer parity
        widths = {shape[2] for name, (_, shape) in decoder.bound.items() if name.startswith(("past.", "present."))}
        assert widths == {1 + NEW}  # bound at the generation's full length (start token + new tokens)
        steps.close()


def test_static_steps_refuse_buffers_past_the_profiles(workdir):
    run = _run("T5", "t5-offline", workdir)
    _, paths = _static_paths(run)
    steps = Seq2SeqTrtStaticSteps({part: OrtIO(path) for part, path in paths.items()}, "cpu", max_rows=2,
                                  max_input=8, max_length=4)
    inputs = {"input_ids": torch.tensor([[5, 6, 1]]), "attention_mask": torch.ones(1, 3, dtype=torch.long)}
    with pytest.raises(Exception, match="exceed the engine's profile maxima"):
        steps.start(inputs, 9)


def test_static_steps_give_hf_captions(workdir):
    """Image-to-text (BLIP): the static export of the caption decoder matches HF, and the steps run a multi-token
    text prompt one engine pass per token on the first profile, then the one-token steps: HF's captions (greedy
    and 3 beams, with and without a text prompt, two images in a batch)."""
    from test_vision2seq import CASES, _hf as hf_captions, _ours as our_captions

    run = make_context(registry.family("BLIP"), ModelOptions(working_dir=str(workdir), static_cache=True,
                                                             device="cpu"))
    run = _bound(run)
    backend, paths = _static_paths(run)
    assert paths["decoder"].parent.name == "vision2seq-fp32-static" and backend.export_max_diff() < 1e-4
    prompts = [encode(run, items) for items in CASES]
    assert max(prompt.input_ids.shape[1] for prompt in prompts) > 1  # a multi-token decoder prompt among them
    for items, prompt in zip(CASES, prompts):
        for beams in (1, 3):
            ios = {part: OrtIO(path) for part, path in paths.items()}
            steps = Seq2SeqTrtStaticSteps(ios, "cpu", max_rows=2 * beams, max_input=8, max_length=8 + NEW)
            assert our_captions(run, steps, prompt, beams) == hf_captions(run, prompt, beams, True), (items, beams)
            keys, first = ios["decoder"].graph_keys, prompt.input_ids.shape[1]
            assert ios["decoder"].profiles == [0, 1] and keys[:first] == [None] * first  # the prompt, uncaptured
            assert all(key is not None for key in keys[first:])
