"""The encoder kind's `predict`: texts from `--prompt` (repeatable) or `--dataset FILE.jsonl` (field "text"),
`--batch-size` texts per forward, every chosen backend side by side.

Per text and backend it prints what the head computes: the label and its softmax probability (text
classification, names from the model's `id2label`), each token's label (token classification: `token/LABEL`,
special tokens left out), or the embedding's size and L2 norm (feature extraction) plus, per backend, the cosine
similarity of the texts' embeddings: a matrix for up to `MATRIX_TEXTS` texts, else a summary (mean, most and
least similar pair). Texts longer than the model's limit are truncated to it, and a note says how many.

JSON (`--json`): `results` holds one entry per backend and text with `backend`, `prompt` and either `embedding`
(floats) or `logits` (floats; per token for token classification) and `label` (per token likewise).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from Encoder.evaluate.common import Forwarded, check_prompts, forward_texts, label_names, token_labels, top_label
from NNDF.errors import UsageError
from NNDF.evaluate import Evaluator
from NNDF.jsonl import read_jsonl, text_of
from NNDF.options import ModelOptions, PredictOptions
from NNDF.results import Report

MATRIX_TEXTS = 6  # up to this many texts the similarity matrix is printed; beyond, a summary per backend
TOKENS_SHOWN = 12  # token classification: tokens printed per text (the JSON has them all)


@dataclass(frozen=True)
class Embedding:
    number: int  # the text's position among the inputs, from 1
    backend: str
    prompt: str
    embedding: tuple[float, ...]  # [H]

    WIDE = ("text",)  # shortened to fit the terminal (NNDF/results.py); the JSON has it whole

    def row(self) -> dict:
        norm = float(torch.tensor(self.embedding, dtype=torch.float64).norm())
        return {"#": self.number, "text": self.prompt, "backend": self.backend, "size": len(self.embedding),
                "norm": norm}

    def to_json(self) -> dict:
        return {"backend": self.backend, "prompt": self.prompt, "embedding": list(self.embedding)}


@dataclass(frozen=True)
class Classified:
    number: int
    backend: str
    prompt: str
    logits: tuple  # [C], or per token [T, C] (token classification)
    label: str | tuple[str, ...]  # the most likely class, or one per token
    score: float | None  # softmax probability of `label` (None per token)
    tokens: tuple[str, ...] = ()  # token classification: the tokens `label` names

    WIDE = ("text", "token labels")

    def row(self) -> dict:
        row = {"#": self.number, "text": self.prompt, "backend": self.backend}
        if not self.tokens:
            return row | {"label": self.label, "score": self.score}
        pairs = [f"{t}/{lab}" for t, lab in zip(self.tokens, self.label)]
        more = f" ... (+{len(pairs) - TOKENS_SHOWN})" if len(pairs) > TOKENS_SHOWN else ""
        return row | {"token labels": " ".join(pairs[:TOKENS_SHOWN]) + more}

    def to_json(self) -> dict:
        label = list(self.label) if self.tokens else self.label
        return {"backend": self.backend, "prompt": self.prompt, "logits": _nested(self.logits), "label": label}


def _nested(values) -> list:
    return [_nested(v) if isinstance(v, tuple) else v for v in values]


@dataclass(frozen=True)
class Similarities:
    """One text's row of a backend's cosine-similarity matrix."""

    backend: str
    number: int
    cosines: tuple[float, ...]  # with texts 1..n

    def row(self) -> dict:
        return {"backend": self.backend, "#": self.number} | {str(i): c for i, c in enumerate(self.cosines, 1)}


@dataclass(frozen=True)
class SimilaritySummary:
    """A backend's cosine similarities over many texts."""

    backend: str
    texts: int
    mean: float  # over the pairs of different texts
    most_similar: tuple[int, int, float]  # (text, text, cosine)
    least_similar: tuple[int, int, float]

    def row(self) -> dict:
        pair = lambda p: f"#{p[0]} ~ #{p[1]}: {p[2]:.4f}"  # noqa: E731
        return {"backend": self.backend, "texts": self.texts, "mean cosine": self.mean,
                "most similar": pair(self.most_similar), "least similar": pair(self.least_similar)}


def load_texts(predict: PredictOptions) -> list[str]:
    """The texts to predict: --prompt values, or the "text" of every line of --dataset."""
    if predict.dataset is not None:
        return [text_of(predict.dataset, n, row) for n, row in read_jsonl(predict.dataset)]
    if not predict.prompt:
        raise UsageError("predict needs texts: give --prompt TEXT (repeatable) or --dataset FILE.jsonl (field \"text\")")
    check_prompts(predict.prompt)
    return list(predict.prompt)


def _results(run, name: str, texts: list[str], out: Forwarded) -> list:
    """One result per text, as the run's head presents it."""
    head = run.family.task.head(run.source, run.options)
    if head.architecture is None:
        return [Embedding(i, name, t, tuple(v.tolist())) for i, (t, v) in enumerate(zip(texts, out.values), 1)]
    names = label_names(run, out.values[0].shape[-1])
    if out.tokens is None:
        return [Classified(i, name, t, tuple(v.tolist()), *top_label(v, names))
                for i, (t, v) in enumerate(zip(texts, out.values), 1)]
    return [Classified(i, name, t, tuple(tuple(r) for r in v.tolist()), token_labels(v, names), None, tokens)
            for i, (t, v, tokens) in enumerate(zip(texts, out.values, out.tokens), 1)]


def similarities(name: str, embeddings: list[torch.Tensor]) -> list:
    """The backend's cosine-similarity matrix (rows), or its summary beyond MATRIX_TEXTS texts."""
    unit = torch.nn.functional.normalize(torch.stack(embeddings).double(), dim=1)
    matrix = unit @ unit.T  # [N, N]
    n = matrix.shape[0]
    if n <= MATRIX_TEXTS:
        return [Similarities(name, i + 1, tuple(matrix[i].tolist())) for i in range(n)]
    pairs = [(i + 1, j + 1, float(matrix[i, j])) for i in range(n) for j in range(i + 1, n)]
    return [SimilaritySummary(name, n, sum(p[2] for p in pairs) / len(pairs), max(pairs, key=lambda p: p[2]),
                              min(pairs, key=lambda p: p[2]))]


def _notes(run, report: Report, texts: list[str], truncated: int) -> None:
    task = run.family.task
    if task.head(run.source, run.options).architecture is None:
        pooling = task.pooling(run.source)
        normalized = ", L2-normalized" if pooling.normalize else ""
        report.notes.append(f"embeddings: {pooling.mode} pooling{normalized} ({pooling.declared_by}); "
                            "second table: cosine similarity of the texts' embeddings, per backend")
    if truncated:
        report.notes.append(f"{truncated} of {len(texts)} texts were longer than {run.source.variant}'s limit of "
                            f"{task.max_length(run)} tokens and were truncated to it")


class Predict(Evaluator):
    """`predict`: every text through each backend in batches; one row per text and backend."""

    def __init__(self, action: str, options: ModelOptions, predict: PredictOptions) -> None:
        super().__init__(action, options, predict)
        self.predict = predict

    def check(self, task) -> None:
        self.texts = load_texts(self.predict)

    def begin(self, run, report) -> None:
        options = self.options
        self.head = run.family.task.head(run.source, run.options)
        report.settings = {"task": self.head.name, "device": run.device.type, "precision": options.precision,
                           "batch_size": options.batch_size, "texts": len(self.texts)}
        self.truncated = 0

    def evaluate(self, run, name: str, backend, steps, report):
        out = forward_texts(run, steps, self.texts, self.options.batch_size, f"{name} predict")
        self.truncated = out.truncated
        if self.head.architecture is None:
            report.extra += similarities(name, out.values)
        return _results(run, name, self.texts, out)

    def end(self, run, report, outcomes: list) -> None:
        per_backend = [rows for _, rows in outcomes]
        report.results = [row for rows in zip(*per_backend) for row in rows]  # per text, the backends side by side
        _notes(run, report, self.texts, self.truncated)
