"""What the encoder actions share: running texts through a backend in batches, label names, timed forwards and
cosine similarity (JSONL files are read by `NNDF.jsonl`, as for every action).

`forward_texts` is the one place texts become outputs: it tokenises a batch (right padded, truncated to the
model's limit by `TextEncoder.encode`), runs `steps.forward` once, and splits the head's output back into one
tensor per text, float32 on the CPU: an embedding [H], class logits [C], or token logits [T_i, C] over the
text's own tokens without the special ones ([CLS], [SEP], <s>, ...). Batch rows never see each other's padding,
so the numbers equal each text run alone (the backends guarantee it; tests/test_encoder_actions.py checks it).
"""
from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch

from NNDF.errors import UsageError
from NNDF.progress import bar
from NNDF.timing import sync

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATASET = ROOT / "data" / "encoder_offline.jsonl"  # `accuracy`'s default for encoder models


# --- texts ---

def check_prompts(prompts: tuple[str, ...]) -> None:
    """--prompt texts: none may be empty (checked before any model loads)."""
    for number, text in enumerate(prompts, 1):
        if not text.strip():
            raise UsageError(f"--prompt {number} is empty: nothing to embed or classify")


# --- outputs ---

@dataclass(frozen=True)
class Forwarded:
    """One backend's outputs for a list of texts."""

    values: list[torch.Tensor]  # per text, float32 on the CPU: embedding [H], logits [C], or token logits [T_i, C]
    tokens: list[tuple[str, ...]] | None  # per text, the tokens of the token logits' rows (token classification)
    truncated: int  # texts cut to the model's limit


def forward_texts(run, steps, texts: list[str], batch: int, desc: str | None = None) -> Forwarded:
    """Every text through `steps`, `batch` texts per forward (the last batch may be smaller); with `desc`, a
    progress bar over the texts (NNDF/progress.py: on a terminal, or with --info)."""
    task = run.family.task
    per_token = task.head(run.source, run.options).per_token
    values, tokens, truncated = [], [], 0
    with bar(desc=desc, total=len(texts), unit="text") if desc else nullcontext() as shown:
        for start in range(0, len(texts), batch):
            truncated += _forward_batch(run, steps, texts[start:start + batch], per_token, values, tokens)
            if shown is not None:
                shown.update(len(texts[start:start + batch]))
    return Forwarded(values, tokens if per_token else None, truncated)


def _forward_batch(run, steps, texts: list[str], per_token: bool, values: list, tokens: list) -> int:
    """One forward of `texts`: appends each text's output (and tokens) to `values` (`tokens`); returns how many
    texts were truncated."""
    task = run.family.task
    encoded = task.encode(run, texts)
    out = steps.forward(encoded.inputs).float().cpu().clone()  # the backend may reuse its output buffer
    if not per_token:
        values += list(out)
        return encoded.truncated
    ids = encoded.inputs["input_ids"].cpu()
    keep = encoded.inputs["attention_mask"].cpu().bool() & ~torch.isin(ids, _special_ids(run))  # [B, T]
    for row in range(out.shape[0]):
        values.append(out[row][keep[row]])
        tokens.append(tuple(run.tokenizer.convert_ids_to_tokens(ids[row][keep[row]].tolist())))
    return encoded.truncated


def _special_ids(run) -> torch.Tensor:
    """Ids of the tokens the tokenizer adds ([CLS], [SEP], <s>, padding, ...): not the unknown token, which
    stands for a word of the text."""
    tok = run.tokenizer
    return torch.tensor(sorted(set(tok.all_special_ids) - {tok.unk_token_id}), dtype=torch.long)


def label_names(run, classes: int) -> list[str]:
    """Names of the classes 0..classes-1: the model's `id2label`, LABEL_i where it names none."""
    names = run.family.task.labels(run.source)
    return [names.get(i, f"LABEL_{i}") for i in range(classes)]


def top_label(logits: torch.Tensor, names: list[str]) -> tuple[str, float]:
    """The most likely class of logits [C] and its softmax probability."""
    probs = torch.softmax(logits.double(), dim=-1)
    index = int(probs.argmax())
    return names[index], float(probs[index])


def token_labels(logits: torch.Tensor, names: list[str]) -> tuple[str, ...]:
    """The most likely class of each row of token logits [T, C]."""
    return tuple(names[i] for i in logits.argmax(dim=-1).tolist())


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """Cosine similarity of two vectors (float64: no rounding of its own near 1): exactly 1 for a vector and itself
    (the reference row), and never past 1, where float64 rounding can land an ulp from it either way (1 - cosine is
    then never negative)."""
    if torch.equal(a, b) and bool(a.any()):
        return 1.0
    return min(float(torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=0)), 1.0)


# --- timing ---

def timed_forward(run, forward, inputs: dict) -> dict[str, float]:
    """Seconds of one forward, the device synchronised before and after (inputs are ready before the clock)."""
    sync(run.device)
    start = time.perf_counter()
    forward(inputs)
    sync(run.device)
    return {"forward": time.perf_counter() - start}

