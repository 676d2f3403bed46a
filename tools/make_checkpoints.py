#!/usr/bin/env python3
"""Write each family's checkpoint.toml expected outputs for its offline default, from HF `generate`.

    python tools/make_checkpoints.py            # all families in NNDF/registry.py

The expected text is produced by transformers' own greedy `generate` (fp32, CPU), never by this harness, so
`run` / `compare` check our backends against an outside reference. Sample inputs live in this script; the
variant's entries are rewritten, other variants' entries (e.g. real hub models) are kept.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

MAX_NEW_TOKENS = 24
INPUTS = [
    "The for statement is used to",
    "A class definition defines a class object",
    "TensorRT is a Deep Learning compiler used for deep learning.\n",
]


def _toml_string(text: str) -> str:
    """A TOML basic string: JSON's escapes (\\n, \\", \\uXXXX for control characters) are valid TOML."""
    return json.dumps(text, ensure_ascii=False)


def expected_outputs(family) -> list[str]:
    import torch
    from transformers import AutoModelForCausalLM

    from NNDF.models import load_tokenizer, resolve_source

    source = resolve_source(family, family.default_variant, None, ROOT / "temp")
    tok = load_tokenizer(source)
    model = AutoModelForCausalLM.from_pretrained(source.location, dtype=torch.float32).eval()
    outputs = []
    for text in INPUTS:
        ids = tok(text, return_tensors="pt")
        out = model.generate(**ids, max_new_tokens=MAX_NEW_TOKENS, do_sample=False, pad_token_id=tok.pad_token_id)
        outputs.append(tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True))
    return outputs


def write(family, outputs: list[str]) -> None:
    lines = [f"# {family.name} golden samples for `run` / `compare`: greedy continuations made by HF generate",
             "# (fp32, CPU) with tools/make_checkpoints.py. Add entries for other variants under [sample.expected].",
             "", "[generation]", f"max_new_tokens = {MAX_NEW_TOKENS}", ""]
    for text, out in zip(INPUTS, outputs):
        lines += ["[[sample]]", f"input = {_toml_string(text)}", "[sample.expected]",
                  f'"{family.default_variant}" = {{ fp32 = {_toml_string(out)} }}', ""]
    family.checkpoint.write_text("\n".join(lines))


def main() -> None:
    from NNDF import registry

    for family in registry.families().values():
        outputs = expected_outputs(family)
        write(family, outputs)
        print(f"{family.checkpoint.relative_to(ROOT)}: {outputs[0][:60]!r} ...")


if __name__ == "__main__":
    main()
