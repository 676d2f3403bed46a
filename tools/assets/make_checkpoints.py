#!/usr/bin/env python3
"""Write each family's checkpoint.toml expected outputs for its offline variants, from HF `generate`.

    python tools/assets/make_checkpoints.py            # all families in NNDF/registry.py
    python tools/assets/make_checkpoints.py T5 BART    # some of them

Encoder families (no generation) are handed to tools/assets/make_encoder_checkpoints.py.

The expected text is produced by transformers' own greedy `generate` (fp32, CPU), never by this harness, so
`run` / `compare` check our backends against an outside reference. Sample inputs live in this script
(prompts for decoder-only models, task prompts for encoder-decoder ones); the file is rewritten.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

MAX_NEW_TOKENS = 24
INPUTS = {
    "decoder": [
        "The for statement is used to",
        "A class definition defines a class object",
        "TensorRT is a Deep Learning compiler used for deep learning.\n",
    ],
    "vision2seq": [  # images (relative to the repository root) and an optional conditional-captioning prefix
        {"image": "BLIP/offline/images/red-square.png"},
        {"image": "BLIP/offline/images/blue-circle.jpg"},
        {"image": "BLIP/offline/images/red-square.png", "input": "a picture of"},
    ],
    "seq2seq": [
        "translate English to German: The house is wonderful.",
        "summarize: The for statement is used to iterate over the elements of a sequence, such as a string or a list.",
        "TensorRT is a Deep Learning compiler used for deep learning.",
    ],
}


def _toml_string(text: str) -> str:
    """A TOML basic string: JSON's escapes (\\n, \\", \\uXXXX for control characters) are valid TOML; DEL, which
    JSON leaves as it is and TOML forbids, escaped too."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def expected_outputs(family, variant: str) -> list[str]:
    import torch
    import transformers

    from NNDF.models import load_tokenizer, resolve_source

    source = resolve_source(family, variant, None, ROOT / "temp")
    tok = load_tokenizer(source)
    auto = getattr(transformers, family.task.auto_class)
    model = auto.from_pretrained(source.location, dtype=torch.float32).eval()
    outputs = []
    for sample in INPUTS[family.kind]:
        if isinstance(sample, dict):  # image-to-text: HF's own processor and generate
            from PIL import Image
            from transformers import AutoProcessor

            processor = AutoProcessor.from_pretrained(source.location)
            image = Image.open(ROOT / sample["image"]).convert("RGB")
            ids = processor(images=image, text=sample.get("input") or None, return_tensors="pt")
            prompt = max(ids["input_ids"].shape[1] - 1, 1) if "input_ids" in ids else 1  # [DEC] + text, no [SEP]
        else:
            ids = tok(sample, return_tensors="pt")
            prompt = 1 if model.config.is_encoder_decoder else ids["input_ids"].shape[1]  # decoder start / prompt
        out = model.generate(**ids, max_new_tokens=MAX_NEW_TOKENS, do_sample=False)
        outputs.append(tok.decode(out[0, prompt:], skip_special_tokens=True))
    return outputs


def write(family, expected: dict[str, list[str]]) -> None:
    lines = [f"# {family.name} golden samples for `run` / `compare`: greedy outputs made by HF generate",
             "# (fp32, CPU) with tools/assets/make_checkpoints.py. Add entries for other variants under "
             "[sample.expected].",
             "", "[generation]", f"max_new_tokens = {MAX_NEW_TOKENS}", ""]
    for i, sample in enumerate(INPUTS[family.kind]):
        fields = sample if isinstance(sample, dict) else {"input": sample}
        lines += ["[[sample]]"] + [f"{key} = {_toml_string(value)}" for key, value in fields.items()]
        lines += ["[sample.expected]"]
        lines += [f'"{variant}" = {{ fp32 = {_toml_string(outs[i])} }}' for variant, outs in expected.items()]
        lines.append("")
    family.checkpoint.write_text("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("families", nargs="*", help="family names (default: every family in NNDF/registry.py)")
    names = parser.parse_args().families
    from NNDF import registry
    from NNDF.tasks import GenerativeTask

    for family in registry.families().values():
        if names and family.name not in names:
            continue
        if not isinstance(family.task, GenerativeTask):  # encoder models generate nothing: their own tool
            from make_encoder_checkpoints import write_family

            write_family(family)
            continue
        expected = {v.name: expected_outputs(family, v.name) for v in family.variants if v.offline}
        write(family, expected)
        print(f"{family.checkpoint.relative_to(ROOT)}: {expected[family.default_variant][0][:60]!r} ...")


if __name__ == "__main__":
    main()
