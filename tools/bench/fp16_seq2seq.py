#!/usr/bin/env python3
"""fp16 against fp32 for the encoder-decoder and image-to-text families, on CUDA (tools/bench/seq2seq_check.sh).

For each model: greedy-decode a padded batch with PyTorch fp32 (the reference), then teacher-force the same
encoder inputs and decoder tokens through (a) the onnxrt backend in fp16 (ONNX Runtime CUDA, the family's
declared fp32 islands) and (b) an alternative (no islands; for BLIP: the vision encoder kept fp32), and report
per model: whether every logit is finite, max |fp16 - fp32| relative to max |fp32 logit|, and the share of
positions whose argmax agrees. Writes one JSON line per case to stdout. Models: the offline variants, and
random-weight t5-small / flan-t5-small / blip-base shapes (HF's default init; trained weights, which is where
T5's fp16 overflow is known, are not reachable here).

    python3 tools/bench/fp16_seq2seq.py          # T5 and BART cases
    python3 tools/bench/fp16_seq2seq.py blip     # BLIP cases
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from NNDF import registry  # noqa: E402
from NNDF.actions.common import encode  # noqa: E402
from NNDF.backends.onnxrt.export import ExportSpec  # noqa: E402
from NNDF.backends.onnxrt.backend import OnnxRuntimeBackend  # noqa: E402
from NNDF.context import make_context  # noqa: E402
from NNDF.options import ModelOptions  # noqa: E402
from Seq2Seq.torch_steps import Seq2SeqTorchSteps  # noqa: E402
from Vision2Seq.model import ImageTextAdapter  # noqa: E402

IMAGES = tuple(str(ROOT / "BLIP" / "offline" / "images" / n) for n in ("red-square.png", "blue-circle.jpg"))

PROMPTS = ["translate English to German: The house is wonderful.", "summarize: A class definition",
           "The for statement is used to iterate over the elements of a sequence"]


def shapes_model(name: str, gated: bool) -> Path:
    from transformers import AutoTokenizer, T5Config, T5ForConditionalGeneration

    out = Path("/tmp/shapes") / name
    tok = AutoTokenizer.from_pretrained(ROOT / "T5" / "offline" / "t5-tokenizer")
    config = T5Config(vocab_size=32128, d_model=512, d_kv=64, d_ff=1024 if gated else 2048, num_layers=8 if gated else 6,
                      num_heads=6 if gated else 8, feed_forward_proj="gated-gelu" if gated else "relu",
                      tie_word_embeddings=not gated, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    torch.manual_seed(0)
    T5ForConditionalGeneration(config).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def blip_base_shapes() -> Path:
    from transformers import AutoTokenizer, BlipConfig, BlipForConditionalGeneration

    out = Path("/tmp/shapes/blip-base-shapes")
    folder = ROOT / "BLIP" / "offline" / "blip-processor"
    tok = AutoTokenizer.from_pretrained(folder)
    config = BlipConfig(text_config=dict(vocab_size=30524, bos_token_id=tok.bos_token_id, pad_token_id=0,
                                         sep_token_id=tok.sep_token_id, eos_token_id=tok.sep_token_id),
                        vision_config=dict(image_size=384, patch_size=16))
    torch.manual_seed(0)
    BlipForConditionalGeneration(config).save_pretrained(out)
    for path in folder.glob("*.json"):
        shutil.copyfile(path, out / path.name)
    processor = json.loads((out / "preprocessor_config.json").read_text())
    processor["size"] = {"height": 384, "width": 384}
    (out / "preprocessor_config.json").write_text(json.dumps(processor))
    (out / "processor_config.json").unlink(missing_ok=True)
    return out


def logits_of(steps, encoder, decoder_ids):
    cache = steps.start(encoder)
    ones = torch.ones_like(decoder_ids)
    return steps.forward(decoder_ids, ones, ones, cache)[0].float()


def compare(family: str, variant: str | None, torch_dir: str | None, wd: Path) -> dict:
    fam = registry.family(family)
    image = fam.kind == "vision2seq"
    opts = dict(variant=variant, torch_dir=torch_dir, device="cuda", use_cache=True, use_mask=True,
                image=IMAGES if image else ())
    run32 = make_context(fam, ModelOptions(working_dir=str(wd / "fp32"), **opts))
    prompt = encode(run32, fam.task.items(run32.options, () if image else PROMPTS))
    encoder = {k: v.cuda() for k, v in prompt.encoder.items()}
    model = run32.torch_model()
    torch_model = ImageTextAdapter(model) if image else model
    with torch.inference_mode():
        inputs = {k: v.cuda() if torch.is_tensor(v) else v for k, v in fam.task.hf_generate_inputs(run32, prompt).items()}
        seqs = model.generate(**inputs, max_new_tokens=24, do_sample=False)
    ref = logits_of(Seq2SeqTorchSteps(torch_model, True), encoder, seqs[:, :-1])
    run32.release_torch_model()
    result = {"family": family, "model": variant or Path(torch_dir).name, "positions": int(ref.shape[0] * ref.shape[1])}
    onnx = registry.backend(fam, "onnxrt").onnx
    declared = onnx.spec
    other = ("vision encoder fp32", ExportSpec(fp32_modules=("vision_model",))) if image else ("no islands", ExportSpec())
    for label, spec in (("declared islands " + repr(declared.fp32_modules), declared), other):
        run16 = make_context(fam, ModelOptions(working_dir=str(wd / label.split()[0]), fp16=True, **opts))
        backend = OnnxRuntimeBackend(fam.task, spec, type(onnx))
        encoder = {k: v.cuda().half() if v.is_floating_point() else v.cuda() for k, v in prompt.encoder.items()}
        try:
            steps = backend.setup(run16)
            got = logits_of(steps, encoder, seqs[:, :-1])
            steps.close()
            result[label] = {"finite": bool(torch.isfinite(got).all()),
                             "max_rel_diff": float((got - ref).abs().max() / ref.abs().max()),
                             "argmax_agree": float((got.argmax(-1) == ref.argmax(-1)).float().mean()),
                             "export_validation_vs_torch_fp16": backend.last_max_diff}
        except Exception as exc:  # report, do not hide: e.g. the export validation failing on non-finite logits
            result[label] = {"error": str(exc).splitlines()[0][:300]}
        run16.release_torch_model()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cases", nargs="?", choices=("seq2seq", "blip"), default="seq2seq",
                        help="seq2seq: T5 and BART (default); blip: BLIP")
    cases = parser.parse_args().cases
    wd = Path("/tmp/wd-fp16")
    shutil.rmtree(wd, ignore_errors=True)
    if cases == "blip":
        for variant, torch_dir in (("blip-offline", None), (None, str(blip_base_shapes()))):
            print(json.dumps(compare("BLIP", variant, torch_dir, wd)), flush=True)
        return
    cases = [("T5", "t5-offline", None), ("T5", "flan-t5-offline", None), ("BART", "bart-offline", None),
             ("BART", "mbart-offline", None), ("T5", None, str(shapes_model("t5-small-shapes", False))),
             ("T5", None, str(shapes_model("flan-t5-small-shapes", True)))]
    for family, variant, torch_dir in cases:
        print(json.dumps(compare(family, variant, torch_dir, wd)), flush=True)


if __name__ == "__main__":
    main()
