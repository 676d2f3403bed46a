"""Encoder-decoder specifics (T5, BART/mBART): scoring definitions against HF's own loss, TensorRT bookkeeping
with ONNX Runtime standing in for the engines, engine profiles, and the all-or-nothing part flags.
(Token-for-token generation parity for every offline variant is in test_parity.py.)"""
import math

import pytest
import torch

from NNDF import registry
from NNDF.actions.accuracy import accuracy
from NNDF.actions.common import encode, generate_prompt
from NNDF.backends.trt.profiles import engine_shapes
from NNDF.context import make_context
from NNDF.generation import GenerationConfig
from NNDF.backends.trt.options import TRTOptions
from NNDF.options import AccuracyOptions, ModelOptions
from Seq2Seq.trt import seq2seq_profiles
from Seq2Seq.trt_steps import Seq2SeqTrtSteps

from conftest import ROOT, run_cli
from NNDF import cli
from test_trt import OrtIO

PROMPTS = ["translate English to German: The house is wonderful.", "summarize: A", "Names refer to objects"]


def _run(family, variant, workdir, use_cache=True):
    return make_context(registry.family(family), ModelOptions(variant=variant, working_dir=str(workdir),
                                                              use_cache=use_cache, use_mask=True, device="cpu"))


@pytest.mark.parametrize("family,variant", [("T5", "t5-offline"), ("BART", "mbart-offline")])
def test_accuracy_metrics_equal_hf_loss(family, variant, workdir, tmp_path):
    """seq2seq accuracy: the encoder reads all but the last k tokens, the decoder is scored on those k tokens
    (TopN, token perplexity) and on them plus EOS (seq perplexity). HF's own `labels` loss recomputes both."""
    data = tmp_path / "passages.jsonl"
    texts = ["The for statement is used to iterate over the elements", "Names refer to objects and are bound"]
    data.write_text("\n".join('{"text": "%s"}' % t for t in texts))
    k = 3
    report = accuracy(family, ("frameworks", "onnxrt"), ModelOptions(variant=variant, working_dir=str(workdir),
                                                                    device="cpu", use_cache=True),
                      AccuracyOptions(dataset=str(data), num_samples=2, tokens_to_generate=k))
    run = _run(family, variant, workdir)
    model, tok = run.torch_model(), run.tokenizer
    forced = run.source.generation.forced_bos_token_id
    token_nll, seq_nll, top1 = [], [], 0
    for text in texts:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        enc = tok.decode(ids[:-k])  # the context text re-tokenised with the tokenizer's own specials
        enc_ids = tok(enc, return_tensors="pt")["input_ids"]
        assert tok(enc, add_special_tokens=False)["input_ids"] == ids[:-k]
        labels = ids[-k:] + [tok.eos_token_id]
        lead = [model.config.decoder_start_token_id] + ([forced] if forced is not None else [])
        dec = torch.tensor([lead + labels[:-1]])
        with torch.no_grad():
            logits = model(input_ids=enc_ids, decoder_input_ids=dec).logits[0, len(lead) - 1:]
        ce = torch.nn.functional.cross_entropy(logits, torch.tensor(labels), reduction="none")
        token_nll.append(float(ce[:k].mean()))
        seq_nll.append(float(ce.mean()))
        top1 += int((logits[:k].argmax(-1) == torch.tensor(labels[:k])).sum())
    for result in report.results:
        assert result.token_perplexity == pytest.approx(math.exp(sum(token_nll) / 2), rel=1e-4)
        assert result.seq_perplexity == pytest.approx(math.exp(sum(seq_nll) / 2), rel=1e-4)
        assert result.topN[1] == pytest.approx(top1 / (2 * k))


@pytest.mark.parametrize("family,variant", [("T5", "t5-offline"), ("BART", "bart-offline")])
@pytest.mark.parametrize("use_cache", [True, False], ids=["kv", "nokv"])
def test_trt_steps_bookkeeping_gives_hf_tokens(family, variant, use_cache, workdir):
    """Seq2SeqTrtSteps through the shared loop (greedy and beam, padded batch), with ONNX Runtime executing each
    bound engine call from the bound memory, equals HF generate: buffers, views, cross-attention cache and beam
    reordering are right. (TensorRT itself is not involved: nothing here is a TensorRT result.)"""
    run = _run(family, variant, workdir, use_cache)
    paths, _ = registry.backend(run.family, "onnxrt").onnx.paths(run)
    prompt = encode(run, PROMPTS)
    model, tok = run.torch_model(), run.tokenizer
    for beams in (1, 3):
        ios = {part: OrtIO(path) for part, path in paths.items()}
        steps = Seq2SeqTrtSteps(ios, "cpu", use_cache, max_rows=3 * beams, max_input=prompt.encoder["input_ids"].shape[1],
                                max_output=8)
        config = GenerationConfig(max_new_tokens=8, num_beams=beams, eos_token_id=tok.eos_token_id,
                                  pad_token_id=tok.pad_token_id)
        out = generate_prompt(steps, prompt, config)
        ref = model.generate(**prompt.encoder, max_new_tokens=8, do_sample=False, num_beams=beams,
                             use_cache=use_cache)
        for r in range(len(PROMPTS)):
            new = ref[r, 1:].tolist()
            if tok.eos_token_id in new:
                new = new[: new.index(tok.eos_token_id) + 1]
            assert out.new_tokens(r, tok.eos_token_id) == new, (beams, r)
        if use_cache:
            assert ios["decoder"].profiles == [0, 1]  # the first step, then one-token steps
            assert all(key is not None for key in ios["decoder"].graph_keys[1:])


def test_profiles_cover_prefill_rows_and_beam_rows():
    class Cfg:
        max_position_embeddings = 512

    shapes = engine_shapes(Cfg(), ModelOptions(batch_size=2, num_beams=3, use_cache=True),
                           TRTOptions(input_profile_max_len=64, output_profile_max_len=32))
    dims = {"encoder": {"input_ids": ("batch", "encoder_seq"), "attention_mask": ("batch", "encoder_seq")},
            "cache_generator": {"encoder_hidden_states": ("batch", "encoder_seq", 512)},
            "decoder": {"input_ids": ("batch", "seq"), "encoder_attention_mask": ("batch", "encoder_seq"),
                        "past.0.key": ("batch", 8, "past", 64), "cross.0.key": ("batch", 8, "encoder_seq", 64)}}
    profiles = seq2seq_profiles(shapes, dims, use_cache=True)
    (encoder,), (generator,), (first, step) = profiles["encoder"], profiles["cache_generator"], profiles["decoder"]
    assert encoder.shapes["input_ids"] == ((2, 1), (2, 32), (2, 64))
    assert generator.shapes["encoder_hidden_states"] == ((2, 1, 512), (2, 32, 512), (2, 64, 512))
    assert first.shapes["past.0.key"] == ((2, 8, 0, 64),) * 3
    assert first.shapes["cross.0.key"] == ((2, 8, 1, 64), (2, 8, 32, 64), (2, 8, 64, 64))
    assert step.shapes["input_ids"] == ((6, 1),) * 3
    assert step.shapes["past.0.key"] == ((6, 8, 1, 64), (6, 8, 17, 64), (6, 8, 33, 64))  # start token + 32
    assert step.shapes["encoder_attention_mask"] == ((6, 1), (6, 32), (6, 64))


@pytest.mark.parametrize("family,variant", [("T5", "t5-offline"), ("BLIP", "blip-offline")])
@pytest.mark.parametrize("use_cache", [True, False], ids=["kv", "nokv"])
def test_profiles_from_the_exported_graphs(family, variant, use_cache, workdir):
    """Every input of every exported part gets a profile from its dimension names (no name left unmapped), and
    the profiles accept the shapes a run binds."""
    run = _run(family, variant, workdir, use_cache)
    backend = registry.backend(run.family, "trt")
    paths, _ = registry.backend(run.family, "onnxrt").onnx.paths(run)
    shapes = engine_shapes(run.source.config.get_text_config(decoder=True), ModelOptions(batch_size=2, num_beams=2),
                           TRTOptions(input_profile_max_len=16, output_profile_max_len=8))
    profiles = backend.profiles(run, shapes, paths)
    assert set(profiles) == set(paths)
    for part, part_profiles in profiles.items():
        for profile in part_profiles:
            for name, (low, opt, high) in profile.shapes.items():
                assert all(a <= b <= c for a, b, c in zip(low, opt, high)), (part, profile.name, name)
    encoder = profiles["encoder"][0].shapes
    if "input_ids" in encoder:  # text encoders: the prompt length range, 2 rows (before beam expansion)
        assert encoder["input_ids"] == ((2, 1), (2, 8), (2, 16))
    else:  # image encoders: fixed pixels
        assert encoder["pixel_values"] == ((2, 3, 32, 32),) * 3


@pytest.mark.parametrize("args,message", [
    (("T5", "onnxrt", "--decoder-onnx", "d.onnx"),
     "error: --encoder-onnx, --decoder-onnx, --cache-generator-onnx go together for T5: "
     "missing --encoder-onnx, --cache-generator-onnx"),
    (("BART", "trt", "--no-use-cache", "--encoder-engine", "e.engine"),
     "error: --encoder-engine, --decoder-engine go together for BART with --no-use-cache: missing --decoder-engine"),
    (("T5", "onnxrt", "--no-use-cache", "--encoder-onnx", "e", "--decoder-onnx", "d", "--cache-generator-onnx", "c"),
     "error: --cache-generator-onnx needs the KV cache (drop --no-use-cache)"),
    (("GPT2", "onnxrt", "--encoder-onnx", "e.onnx"),
     "error: --encoder-onnx does not apply to GPT2 (decoder models have: decoder)"),
])
def test_part_flags_are_all_or_nothing(args, message, tmp_path, capsys):
    """In process (`cli.main`): the refusal comes before any model loads; the whole program's exit code and
    stderr for the same check are test_missing_user_onnx_is_one_line's (through run.py)."""
    assert cli.main(["run", *args, "-wd", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == message


def test_missing_user_onnx_is_one_line(tmp_path):
    proc = run_cli("run", "T5", "onnxrt", "--no-use-cache", "--encoder-onnx", "nope-e.onnx", "--decoder-onnx",
                   str(ROOT / "README.md"), "-wd", str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.strip() == "error: --encoder-onnx nope-e.onnx does not exist"


def test_beam_reordering_leaves_encoder_side_tensors_alone():
    """Prompt expansion gathers the encoder side; per-step beam reordering (within each input's beams, whose
    encoder output, mask and cross-attention keys/values are identical) copies none of it."""
    from Seq2Seq.torch_steps import Seq2SeqCache

    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    cache = Seq2SeqCache(torch.randn(2, 3, 4), mask)
    expanded = cache.select(torch.tensor([0, 0, 0, 1, 1, 1]), None)  # 2 inputs x 3 beams
    assert expanded.items.tolist() == [0, 0, 0, 1, 1, 1] and expanded.encoder_mask.tolist()[3] == [1, 1, 1]
    beams = torch.tensor([2, 2, 0, 4, 3, 3])  # parents within each input
    assert not expanded.moves_inputs(beams)
    assert expanded.select(beams, None).encoder_hidden is expanded.encoder_hidden  # no gather, no copy
    assert expanded.moves_inputs(torch.tensor([3, 3, 3, 0, 0, 0]))
