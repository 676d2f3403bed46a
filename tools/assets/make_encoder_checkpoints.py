#!/usr/bin/env python3
"""Write the encoder families' checkpoint.toml expected outputs for their offline variants.

    python tools/assets/make_encoder_checkpoints.py          # every encoder family in NNDF/registry.py
    python tools/assets/make_encoder_checkpoints.py BERT

The expected values come from the outside reference, never from this harness's backends: sentence-transformers'
own `SentenceTransformer.encode` for a sentence-transformers folder (plain transformers `AutoModel` with mean
pooling over the attention mask for a bare encoder), and transformers' `AutoModelFor{Sequence,Token}
Classification` for classifiers (fp32, CPU). Per sample and variant, one of:
    label = "positive"                              # a text classifier's most likely class (id2label)
    labels = ["B-PER", "O", ...]                    # a token classifier's, per token without the special ones
    embedding = [...]  min_cosine = 0.999           # the whole vector, 6 decimals; `run` checks the cosine
The file is rewritten. tools/assets/make_checkpoints.py calls `write_family` for encoder families.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

SAMPLES = [
    "The weather is lovely today.",
    "I hated this movie and walked out early.",
    "John lives in Paris and works for the United Nations.",
    "A man is playing a guitar on the street.",
]
MIN_COSINE = 0.999  # fp32 backends agree to ~1e-6; the threshold leaves room for graph optimisers' reordering
DECIMALS = 6


def _embeddings(location: str) -> list[list[float]]:
    """sentence-transformers' own encode (its modules.json pooling and normalization), else mean pooling."""
    import torch

    if (Path(location) / "modules.json").exists():
        from sentence_transformers import SentenceTransformer

        return SentenceTransformer(location, device="cpu").encode(SAMPLES, convert_to_numpy=True).tolist()
    from transformers import AutoModel, AutoTokenizer

    tok, model = AutoTokenizer.from_pretrained(location), AutoModel.from_pretrained(location).eval()
    out = []
    for text in SAMPLES:
        inputs = tok(text, return_tensors="pt", truncation=True)
        with torch.no_grad():
            hidden = model(**inputs).last_hidden_state[0]  # [T, H]
        out.append(hidden.mean(dim=0).tolist())  # one text: every token is kept
    return out


def _classes(location: str, per_token: bool) -> list[dict]:
    """The most likely class per text (or per token), with HF's classifier classes."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification, AutoTokenizer

    auto = AutoModelForTokenClassification if per_token else AutoModelForSequenceClassification
    tok, model = AutoTokenizer.from_pretrained(location), auto.from_pretrained(location).eval()
    names = model.config.id2label
    out = []
    for text in SAMPLES:
        inputs = tok(text, return_tensors="pt", truncation=True, return_special_tokens_mask=True)
        special = inputs.pop("special_tokens_mask")[0].bool()
        with torch.no_grad():
            logits = model(**inputs).logits[0]  # [C], or [T, C]
        top2 = logits.topk(2, dim=-1).values
        margin = float((top2[..., 0] - top2[..., 1]).min())
        if per_token:
            out.append({"labels": [names[int(i)] for i in logits[~special].argmax(-1)], "margin": margin})
        else:
            out.append({"label": names[int(logits.argmax())], "margin": margin})
    return out


def expected_outputs(family, variant: str) -> list[dict]:
    from NNDF.models import resolve_source

    source = resolve_source(family, variant, None, ROOT / "temp")  # materialises packaged / random offline models
    architectures = tuple(source.config.architectures or ())
    if any(a.endswith("ForSequenceClassification") for a in architectures):
        return _classes(source.location, per_token=False)
    if any(a.endswith("ForTokenClassification") for a in architectures):
        return _classes(source.location, per_token=True)
    return [{"embedding": [round(x, DECIMALS) for x in e], "min_cosine": MIN_COSINE}
            for e in _embeddings(source.location)]


def _toml_value(value) -> str:
    import json

    if isinstance(value, list) and value and isinstance(value[0], float):  # ten numbers a line
        lines = [", ".join(repr(x) for x in value[i:i + 10]) for i in range(0, len(value), 10)]
        return "[\n    " + ",\n    ".join(lines) + ",\n]"
    return json.dumps(value, ensure_ascii=False)  # strings and lists of strings: JSON is valid TOML


def write_family(family) -> None:
    expected = {v.name: expected_outputs(family, v.name) for v in family.variants if v.offline}
    lines = [f"# {family.name} golden samples for `run` / `compare`, written by "
             "tools/assets/make_encoder_checkpoints.py from",
             "# sentence-transformers (embeddings) and transformers' classifiers (labels), fp32 on the CPU.",
             "# Per variant and precision: label (text classifier), labels (token classifier, special tokens left",
             "# out) or embedding (the whole vector) with min_cosine.", ""]
    for i, text in enumerate(SAMPLES):
        lines += ["[[sample]]", f"input = {_toml_value(text)}", ""]
        for variant, outputs in expected.items():
            entry = {k: v for k, v in outputs[i].items() if k != "margin"}
            lines += [f'[sample.expected."{variant}".fp32]'] + [f"{k} = {_toml_value(v)}" for k, v in entry.items()]
            lines.append("")
    family.checkpoint.write_text("\n".join(lines))
    for variant, outputs in expected.items():
        margins = [o["margin"] for o in outputs if "margin" in o]
        if margins:  # a near tie could flip between backends: say how safe the goldens are
            print(f"{variant}: smallest top-1 vs top-2 logit margin {min(margins):.4f}")
    print(f"{family.checkpoint.relative_to(ROOT)}: {len(SAMPLES)} samples, variants {', '.join(expected)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("families", nargs="*", help="family names (default: every encoder family in NNDF/registry.py)")
    names = parser.parse_args().families
    from NNDF import registry
    from NNDF.tasks import GenerativeTask

    for family in registry.families().values():
        if isinstance(family.task, GenerativeTask) or (names and family.name not in names):
            continue
        write_family(family)


if __name__ == "__main__":
    main()
