"""The encoder kind's `run` and `compare`: the family's checkpoint.toml samples on one or several backends.

checkpoint.toml holds `[[sample]]` entries with an `input` text and, per variant and precision, what the
outside reference computed (tools/assets/make_encoder_checkpoints.py: sentence-transformers, HF classifiers):
    [sample.expected."<variant>".fp32]
    label = "positive"                 # text classification: the most likely class
    labels = ["B-PER", "O", ...]       # token classification: per token, special tokens left out
    embedding = [...]                  # feature extraction: the whole vector (6 decimals)
    min_cosine = 0.999                 #   passes when cosine(output, embedding) >= this, over the full vector
Per sample and backend: the output (label and its probability, token labels, or the embedding's norm and
cosine), pass / FAIL (n/a where nothing is expected for this variant, precision and task), and the median
seconds per forward of `--batch-size` copies of the input (`--iterations`, `--warmup`). `run` prints one row per
sample, `compare` one row per backend: samples passed, minimum cosine, median seconds per forward.
"""
from __future__ import annotations

import statistics
import tomllib
from dataclasses import dataclass

import torch

from Encoder.evaluate.common import (cosine, forward_texts, label_names, timed_forward, token_labels,
                                    top_label)
from NNDF.errors import UsageError
from NNDF.evaluate import Evaluator
from NNDF.options import ModelOptions, SamplingOptions, TimingOptions
from NNDF.timing import measure

EXPECTED_KEYS = {"label", "labels", "embedding"}  # one per expected entry: what it checks


@dataclass(frozen=True)
class SampleCheck:
    backend: str
    input: str
    output: str  # the label (probability), token labels, or the embedding's norm
    expected: str | None  # what checkpoint.toml expects, in words (None: nothing for this run)
    passed: bool | None  # None: nothing to check
    cosine: float | None  # feature extraction: to the expected embedding
    forward_s: float  # median seconds per forward

    WIDE = ("input", "output", "expected")  # shortened to fit the terminal (NNDF/results.py)

    def row(self) -> dict:
        check = "n/a" if self.passed is None else ("pass" if self.passed else "FAIL")
        return {"backend": self.backend, "input": self.input, "output": self.output,
                "expected": self.expected or "-", "check": check, "forward (sec)": self.forward_s}


@dataclass(frozen=True)
class BackendCheck:
    backend: str
    passed: int
    checked: int
    accuracy: float | None  # passed / checked (None: nothing checked)
    min_cosine: float | None
    forward_s: float  # median over the samples
    samples: tuple[SampleCheck, ...]

    def row(self) -> dict:
        return {"backend": self.backend, "passed": f"{self.passed}/{self.checked}",
                "accuracy": "n/a" if self.accuracy is None else self.accuracy,
                "1 - min cosine": "-" if self.min_cosine is None else 1 - self.min_cosine, "forward (sec)": self.forward_s}


def load_samples(run) -> list[dict]:
    path = run.family.checkpoint
    try:
        samples = tomllib.loads(path.read_text(encoding="utf-8")).get("sample", [])
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from exc
    if not samples or any(not isinstance(s.get("input"), str) for s in samples):
        raise UsageError(f"{path}: needs [[sample]] entries, each with an input text")
    return samples


def expected_for(run, sample: dict) -> dict | None:
    """What the sample expects from this run (variant, precision) when it fits the run's head, else None."""
    entry = sample.get("expected", {}).get(run.source.variant, {}).get(run.options.precision)
    if not entry:
        return None
    head = run.family.task.head(run.source, run.options)
    fits = {"embedding": head.architecture is None, "label": bool(head.architecture) and not head.per_token,
            "labels": head.per_token}
    kinds = EXPECTED_KEYS & entry.keys()
    if len(kinds) != 1:
        raise UsageError(f"{run.family.checkpoint}: an expected entry of {run.source.variant} needs one of "
                         f"{', '.join(sorted(EXPECTED_KEYS))}")
    return entry if fits[kinds.pop()] else None


@dataclass(frozen=True)
class Verdict:
    output: str
    expected: str | None = None  # None: nothing expected
    passed: bool | None = None
    cosine: float | None = None


def judge(run, value: torch.Tensor, tokens: tuple[str, ...] | None, entry: dict | None) -> Verdict:
    """One output (embedding [H], logits [C] or token logits [T, C]) against its expected entry."""
    if run.family.task.head(run.source, run.options).architecture is None:
        return _judge_embedding(value, entry)
    names = label_names(run, value.shape[-1])
    if tokens is not None:
        labels = list(token_labels(value, names))
        output = " ".join(f"{t}/{lab}" for t, lab in zip(tokens, labels))
        return Verdict(output) if entry is None else Verdict(output, " ".join(entry["labels"]), labels == entry["labels"])
    label, score = top_label(value, names)
    output = f"{label} ({score:.4f})"
    return Verdict(output) if entry is None else Verdict(output, entry["label"], label == entry["label"])


def _judge_embedding(value: torch.Tensor, entry: dict | None) -> Verdict:
    output = f"norm {float(value.double().norm()):.6f}"
    if entry is None:
        return Verdict(output)
    want = torch.tensor(entry["embedding"], dtype=torch.float64)
    if want.shape != value.shape:
        return Verdict(output, f"an embedding of {want.numel()}", False)
    cos = cosine(value, want)
    return Verdict(f"{output}, cosine {cos:.8f}", f"cosine >= {entry['min_cosine']}", cos >= entry["min_cosine"], cos)


def check_sample(run, name: str, steps, sample: dict, timing: TimingOptions) -> SampleCheck:
    texts = [sample["input"]] * run.options.batch_size
    out = forward_texts(run, steps, texts, len(texts))
    tokens = out.tokens[0] if out.tokens else None
    verdict = judge(run, out.values[0], tokens, expected_for(run, sample))
    inputs = run.family.task.encode(run, texts).inputs
    seconds = [s["forward"] for s in measure(lambda: timed_forward(run, steps.forward, inputs), timing,
                                             f"{name} sample")]
    return SampleCheck(name, sample["input"], verdict.output, verdict.expected, verdict.passed, verdict.cosine,
                       statistics.median(seconds))


def _summary(name: str, results: list[SampleCheck]) -> BackendCheck:
    checked = [r for r in results if r.passed is not None]
    passed = sum(r.passed for r in checked)
    cosines = [r.cosine for r in results if r.cosine is not None]
    return BackendCheck(name, passed, len(checked), passed / len(checked) if checked else None,
                        min(cosines) if cosines else None, statistics.median(r.forward_s for r in results),
                        tuple(results))


class Checkpoint(Evaluator):
    """`run` and `compare` for encoder models: each sample's output held to what checkpoint.toml expects."""

    def __init__(self, action: str, options: ModelOptions, sampling: SamplingOptions, timing: TimingOptions) -> None:
        super().__init__(action, options, sampling, timing)
        self.sampling, self.timing = sampling, timing
        self.side_by_side = action == "compare"

    def check(self, task) -> None:
        """The group's one field encoder models read (the benchmark's random inputs) means nothing here."""
        if self.sampling.seed != SamplingOptions.seed:
            raise UsageError("--seed does not apply to run / compare for encoder models (their samples are fixed "
                             "texts, nothing is random)")

    def begin(self, run, report) -> None:
        options = self.options
        self.samples = load_samples(run)
        self.head = run.family.task.head(run.source, options)
        report.settings = {"task": self.head.name, "device": run.device.type, "precision": options.precision,
                           "batch_size": options.batch_size, "iterations": self.timing.iterations}

    def evaluate(self, run, name: str, backend, steps, report):
        results = [check_sample(run, name, steps, s, self.timing) for s in self.samples]
        report.results.extend([_summary(name, results)] if self.side_by_side else results)

    def end(self, run, report, outcomes: list) -> None:
        if not any(expected_for(run, s) for s in self.samples):
            report.notes.append(f"{run.family.checkpoint.name} expects nothing of {run.source.variant} "
                                f"{self.options.precision} {self.head.name}: checks are n/a")
