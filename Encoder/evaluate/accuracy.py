"""The encoder kind's `accuracy`: a labelled JSONL (`text`, `label`) through every chosen backend, each held to
the labels and to PyTorch fp32 on the CPU.

The reference is the `frameworks` backend, fp32, on the CPU, computed in the same call: it is the run's own
`frameworks` results when the run is exactly that, else an extra pass (the report says which). Per backend:
- text classification: accuracy (share of texts whose most likely class is the file's label), agreement (share
  whose class equals the reference's) and the largest |logit - reference logit|;
- token classification: agreement per token and the largest logit difference (the file has one label per text,
  not per token: accuracy is n/a);
- feature extraction: mean and minimum cosine similarity of each text's embedding to the reference's (labels are
  not read).
Labels are the model's `id2label` names (matched ignoring case: "positive" is SST-2's "POSITIVE") or class
indices; a label the model does not have is one line naming it and the valid ones.

The default `--dataset` ("lambada", the generative families' default) means `data/encoder_offline.jsonl` here:
40 short plain English sentences, alternately labelled "positive" and "negative" (no "neutral"), so the default
works for the default (embeddings) and for 2- and 3-class sentiment classifiers alike. `--num-samples` (default
20) takes the first lines.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from Encoder.evaluate.common import DEFAULT_DATASET, Forwarded, cosine, forward_texts, label_names
from NNDF.errors import DatasetError
from NNDF.evaluate import Evaluator
from NNDF.jsonl import read_jsonl, short_note, text_of
from NNDF.options import AccuracyOptions, ModelOptions
from NNDF.results import Report
from NNDF.session import backend_steps, finish, open_run

REFERENCE = "frameworks"  # the backend whose fp32 CPU outputs every backend is compared with


@dataclass(frozen=True)
class LabelAccuracy:
    backend: str
    accuracy: float | None  # share of texts labelled as the file says (None: token classification)
    agreement: float  # share of texts (tokens) whose class equals the reference's
    max_abs_diff: float  # largest |logit - reference logit|
    num_samples: int
    predicted: tuple[str, ...]  # per text (text classification) or per token

    def row(self) -> dict:
        return {"backend": self.backend, "accuracy": "n/a" if self.accuracy is None else self.accuracy,
                "agreement": self.agreement, "max logit diff": self.max_abs_diff, "samples": self.num_samples}


@dataclass(frozen=True)
class EmbeddingAgreement:
    backend: str
    mean_cosine: float  # to the reference's embedding of the same text
    min_cosine: float
    num_samples: int
    cosines: tuple[float, ...]  # per text

    def row(self) -> dict:
        return {"backend": self.backend, "1 - mean cosine": 1 - self.mean_cosine, "1 - min cosine": 1 - self.min_cosine,
                "samples": self.num_samples}


def _dataset(acc: AccuracyOptions) -> tuple[str, str, str | None]:
    """The file to read, its name for the report, and a note when the generative default ("lambada") was
    replaced by the encoders' own."""
    if acc.dataset != AccuracyOptions.dataset:
        return acc.dataset, acc.dataset, None
    shown = str(DEFAULT_DATASET.relative_to(DEFAULT_DATASET.parents[1]))
    return str(DEFAULT_DATASET), shown, f"dataset: {shown}, the default for encoder models (--dataset FILE.jsonl)"


def _gold(dataset: str, rows: list[tuple[int, dict]], names: list[str]) -> list[int]:
    """Each line's class index, from its label's name (any case) or index."""
    lookup = {n.lower(): i for i, n in enumerate(names)}
    valid = f"{', '.join(names)} (or indices 0-{len(names) - 1})"
    gold = []
    for number, row in rows:
        label = row.get("label")
        if "label" not in row:
            raise DatasetError(f"--dataset {dataset}: line {number} has no \"label\" field (one of {valid})")
        index = label if isinstance(label, int) and not isinstance(label, bool) else (
            lookup.get(label.lower()) if isinstance(label, str) else None)
        if index is None or not 0 <= index < len(names):
            raise DatasetError(f"--dataset {dataset}: line {number}: unknown label {label!r}; the model's labels: "
                               f"{valid}")
        gold.append(index)
    return gold


def _reference(run, texts: list[str], rows: tuple[str, ...], report: Report) -> Forwarded | None:
    """frameworks fp32 on the CPU (None: the run's own frameworks pass is exactly that)."""
    if REFERENCE in rows and run.device.type == "cpu" and not run.options.fp16:
        report.notes.append(f"agreement: with this run's {REFERENCE} results (fp32, CPU)")
        return None
    options = dataclasses.replace(run.options, device="cpu", cpu=False, fp16=False, use_cuda_graph=False,
                                  torch_compile=False, compile_mode="default", cleanup=False)
    backend = run.bind(REFERENCE)
    reference = open_run(run.family, options, (backend,), bind=run.bind)
    with backend_steps(reference, backend) as (_, steps):
        out = forward_texts(reference, steps, texts, options.batch_size)
    finish(reference)
    report.notes.append(f"agreement: with {REFERENCE} fp32 on the CPU, computed in this run as the reference")
    return out


def _labels_result(name: str, out: Forwarded, ref: Forwarded, gold: list[int] | None, names) -> LabelAccuracy:
    """Classification: accuracy (text classes) and agreement with the reference (text or token classes)."""
    ours = torch.cat([v.reshape(-1, v.shape[-1]) for v in out.values]).argmax(-1)  # [texts or tokens]
    theirs = torch.cat([v.reshape(-1, v.shape[-1]) for v in ref.values]).argmax(-1)
    diff = max(float((a - b).abs().max()) for a, b in zip(out.values, ref.values))
    accuracy = None if gold is None else float((ours == torch.tensor(gold)).double().mean())
    return LabelAccuracy(name, accuracy, float((ours == theirs).double().mean()), diff, len(out.values),
                         tuple(names[i] for i in ours.tolist()))


def _embedding_result(name: str, out: Forwarded, ref: Forwarded) -> EmbeddingAgreement:
    cosines = tuple(cosine(a, b) for a, b in zip(out.values, ref.values))
    return EmbeddingAgreement(name, sum(cosines) / len(cosines), min(cosines), len(cosines), cosines)


class Accuracy(Evaluator):
    """`accuracy` for encoder models: labels and agreement with PyTorch fp32 on the CPU."""

    def __init__(self, action: str, options: ModelOptions, acc: AccuracyOptions) -> None:
        super().__init__(action, options, acc)
        self.acc = acc

    def check(self, task) -> None:
        self.dataset, self.shown, self.note = _dataset(self.acc)
        self.rows = read_jsonl(self.dataset, self.acc.num_samples)
        self.texts = [text_of(self.dataset, number, row) for number, row in self.rows]

    def begin(self, run, report) -> None:
        options = self.options
        self.head = head = run.family.task.head(run.source, options)
        self.names = label_names(run, len(run.family.task.labels(run.source)))
        self.gold = (_gold(self.dataset, self.rows, self.names) if head.architecture and not head.per_token
                     else None)  # before any pass
        report.settings = {"task": head.name, "dataset": self.shown, "num_samples": len(self.texts),
                           "device": run.device.type, "precision": options.precision}
        report.notes += filter(None, [self.note, short_note(self.shown, self.acc.num_samples, len(self.texts))])

    def evaluate(self, run, name: str, backend, steps, report):
        return forward_texts(run, steps, self.texts, self.options.batch_size, f"{name} accuracy")

    def end(self, run, report, outcomes: list) -> None:
        outputs = dict(outcomes)
        ref = _reference(run, self.texts, tuple(outputs), report) or outputs[REFERENCE]
        if self.head.architecture is None:
            report.results = [_embedding_result(name, out, ref) for name, out in outputs.items()]
        else:
            report.results = [_labels_result(name, out, ref, self.gold, self.names) for name, out in outputs.items()]
        if self.head.per_token:
            report.notes.append("token classification: agreement per token; the file has one label per text, so "
                                "accuracy is n/a")
