"""`accuracy` for the generative kinds: LAMBADA-style scoring by teacher forcing, with the TensorRT HuggingFace
demo's metrics and lm-eval-harness's.

Per passage (token ids t_0..t_{L-1}, k = --tokens-to-generate), one forward pass over the whole passage gives
the logits that predict each next token. Definitions (also in docs/USAGE.md):
- TopN accuracy: share, over all samples' last k positions, where the true token is among the N largest logits.
- token_perplexity: exp(mean over samples of the mean cross-entropy of the last k tokens).
- seq_perplexity: exp(mean over samples of the mean cross-entropy of tokens 1..L-1).
- lm_eval_acc / lm_eval_perplexity (lm-eval-harness's LAMBADA): context = passage without its last
  whitespace-separated word, target = " " + that word, tokenised separately; acc = share of passages where
  every target token is the greedy choice; perplexity = exp(-mean over passages of the target's summed
  log-probability).
Passages are taken in file order, without replacement. Encoder-decoder models (Seq2Seq/task.py): the encoder
reads all but the last k tokens, the decoder is scored on those k tokens (TopN, token_perplexity) and on them
plus EOS (seq_perplexity); lm-eval's context goes to the encoder, its target to the decoder. The split and the
teacher forcing are the family task's (`split_passage`, `teacher_force`); the metrics are computed here.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from NNDF.context import RunContext
from NNDF.errors import DatasetError, UsageError
from NNDF.family import ROOT
from NNDF.evaluate import Evaluator
from NNDF.jsonl import read_jsonl, short_note, text_of
from NNDF.options import AccuracyOptions, ModelOptions
from NNDF.progress import bar
from NNDF.results import Report


@dataclass(frozen=True)
class PassageScore:
    topn_hits: dict[int, int]  # N -> hits among the k scored positions
    scored: int  # k
    token_nll: float  # mean cross-entropy of the last k tokens
    seq_nll: float  # mean cross-entropy of tokens 1..L-1
    last_word_logprob: float
    last_word_greedy: bool
    greedy: tuple[int, ...] = ()  # the argmax token of every scored row (tokens 1..L-1): agreement between rows


@dataclass(frozen=True)
class AccuracyResult:
    backend: str
    topN: dict[int, float]
    token_perplexity: float
    seq_perplexity: float
    lm_eval_acc: float
    lm_eval_perplexity: float
    num_samples: int
    samples: tuple[PassageScore, ...]
    greedy_agreement: float | None = None  # share of positions whose argmax equals the first row's (None: first)

    def row(self) -> dict:
        row = {"backend": self.backend}
        row.update({f"top{n}": acc for n, acc in sorted(self.topN.items())})
        row.update({"token ppl": self.token_perplexity, "seq ppl": self.seq_perplexity,
                    "lm-eval acc": self.lm_eval_acc, "lm-eval ppl": self.lm_eval_perplexity,
                    "samples": self.num_samples})
        if self.greedy_agreement is not None:
            row["greedy = row 1"] = self.greedy_agreement
        return row

    def to_json(self) -> dict:
        d = {"backend": self.backend, "token_perplexity": self.token_perplexity,
             "seq_perplexity": self.seq_perplexity, "lm_eval_acc": self.lm_eval_acc,
             "lm_eval_perplexity": self.lm_eval_perplexity, "num_samples": self.num_samples,
             "greedy_agreement_with_first": self.greedy_agreement,
             "topN": {str(n): a for n, a in sorted(self.topN.items())}}
        d.update({f"top{n}": a for n, a in self.topN.items()})
        d["samples"] = [s.__dict__ | {"topn_hits": {str(k): v for k, v in s.topn_hits.items()}} for s in self.samples]
        return d


def load_passages(dataset: str, count: int) -> list[str]:
    """The first `count` passages of a local JSONL file (field "text") or an HF dataset's validation split."""
    path = Path(dataset)
    if path.suffix in (".jsonl", ".json") or path.exists():
        texts = [text_of(dataset, number, row) for number, row in read_jsonl(dataset, count)]
    else:
        texts = _hub_passages(dataset, count)
    if not texts:
        raise DatasetError(f"dataset {dataset!r} has no passages")
    return texts


def check_passages(run: RunContext, passages: list[str], k: int) -> None:
    """Refuse, before any backend is set up, a passage that cannot be scored: one word (lm-eval needs a context
    before the last word), no more than k tokens, or longer than the model's positions (past a position table is
    an IndexError on the CPU and a device-side assert on CUDA)."""
    task, limit = run.family.task, run.source.dims.positions
    for number, text in enumerate(passages, 1):
        if " " not in text.strip():
            raise DatasetError(f"passage {number} is a single word: lm-eval scoring needs a context before the "
                               "last word")
        ids = task.passage_ids(run.tokenizer, text)
        if len(ids) <= k:
            raise UsageError(f"passage {number} has only {len(ids)} tokens; --tokens-to-generate must be below "
                             "that")
        if task.length_problem(run, len(ids), 0):
            raise DatasetError(f"passage {number} is {len(ids)} tokens, longer than {run.source.variant}'s {limit} "
                               "positions: use shorter passages")


def _shown(path: Path) -> str:
    """A path of the clone as a command typed here takes it: relative below this folder, else whole."""
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


def _hub_passages(name: str, count: int) -> list[str]:
    try:
        import datasets

        data = datasets.load_dataset(name, split="validation")
    except Exception as exc:  # datasets raises many types (connection, missing config, ...)
        raise DatasetError(
            f"cannot load dataset {name!r} ({type(exc).__name__}); the HuggingFace Hub may be unreachable: "
            f"pass a local JSONL file, e.g. --dataset {_shown(ROOT / 'data' / 'lambada_offline.jsonl')}") from exc
    return [row["text"] for row in data.select(range(min(count, len(data))))]


def score_passage(run: RunContext, steps, text: str, k: int, tops: list[int]) -> PassageScore:
    task, tok = run.family.task, run.tokenizer
    ids = task.passage_ids(tok, text)
    if len(ids) <= k:
        raise UsageError(f"a passage has only {len(ids)} tokens; --tokens-to-generate must be below that")
    context, target, last_k = task.split_passage(ids, k, tok.eos_token_id)
    logp = task.teacher_force(run, steps, context, target)  # [len(target), V]: row i predicts target[i]
    truth = torch.tensor(target, device=logp.device)
    nll = -logp.gather(1, truth[:, None]).squeeze(1)
    last, truth_k = logp[last_k], truth[last_k]  # the rows predicting the last k tokens
    hits = {n: int((torch.topk(last, n, dim=-1).indices == truth_k[:, None]).any(dim=-1).sum()) for n in tops}
    word_lp, greedy = _last_word(run, steps, text, (context, target, logp))
    return PassageScore(hits, k, float(nll[last_k].mean()), float(nll.mean()), word_lp, greedy,
                        tuple(logp.argmax(-1).tolist()))


def _last_word(run: RunContext, steps, text: str, passage) -> tuple[float, bool]:
    """lm-eval: summed log-prob of " " + last word given the rest, and whether it is all greedy. A one-stream
    model (decoder-only) reuses the passage's pass when context and target tokenise to exactly its ids (usual)."""
    if " " not in text.strip():
        raise UsageError("a passage is a single word: lm-eval scoring needs a context before the last word")
    task, (p_context, p_target, p_logp) = run.family.task, passage
    context, word = text.rsplit(" ", 1)
    ctx = task.passage_ids(run.tokenizer, context)
    target = run.tokenizer(" " + word, add_special_tokens=False)["input_ids"]
    start = len(ctx) - len(p_context)  # row of p_logp predicting target[0], if reusable
    if task.one_stream and ctx + target == p_context + p_target and start >= 0:
        rows = p_logp[start: start + len(target)]
    else:
        rows = task.teacher_force(run, steps, ctx, target)
    want = torch.tensor(target, device=rows.device)
    return float(rows.gather(1, want[:, None]).sum()), bool((rows.argmax(-1) == want).all())


def _aggregate(name: str, scores: list[PassageScore], tops: list[int]) -> AccuracyResult:
    positions = sum(s.scored for s in scores)
    top = {n: sum(s.topn_hits[n] for s in scores) / positions for n in tops}
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    return AccuracyResult(
        name, top, math.exp(mean([s.token_nll for s in scores])), math.exp(mean([s.seq_nll for s in scores])),
        mean([float(s.last_word_greedy) for s in scores]), math.exp(-mean([s.last_word_logprob for s in scores])),
        len(scores), tuple(scores))


class Accuracy(Evaluator):
    """`accuracy` for the generative kinds: teacher-forced passages, the metrics above."""

    def __init__(self, action: str, options: ModelOptions, acc: AccuracyOptions) -> None:
        super().__init__(action, options, acc)
        self.acc = acc

    def check(self, task) -> None:
        if (self.options.num_beams or 1) > 1:  # the user's flag: a model's configured beams do not apply to scoring
            raise UsageError("accuracy scores teacher-forced logits; --num-beams does not apply (use 1)")
        if task.accuracy_refusal:
            raise UsageError(task.accuracy_refusal)
        self.passages = load_passages(self.acc.dataset, self.acc.num_samples)

    def begin(self, run, report) -> None:
        acc = self.acc
        if acc.topN > run.source.dims.vocab:
            raise UsageError(f"--topN {acc.topN} exceeds {run.source.variant}'s vocabulary of "
                             f"{run.source.dims.vocab} tokens")
        check_passages(run, self.passages, acc.tokens_to_generate)
        self.tops = sorted({1, acc.topN, 10})
        report.settings = {"dataset": acc.dataset, "num_samples": len(self.passages),
                           "tokens_to_generate": acc.tokens_to_generate, "device": run.device.type,
                           "precision": self.options.precision}
        report.notes += filter(None, [short_note(acc.dataset, acc.num_samples, len(self.passages))])

    def evaluate(self, run, name: str, backend, steps, report):
        return [score_passage(run, steps, text, self.acc.tokens_to_generate, self.tops)
                for text in bar(self.passages, desc=f"{name} accuracy", unit="passage")]

    def end(self, run, report, outcomes: list) -> None:
        report.results.extend(_aggregate(name, scores, self.tops) for name, scores in outcomes)
        _agreement(report)


def _agreement(report: Report) -> None:
    """With several rows (e.g. --quantize none int8 int4): how often each row's greedy (argmax) token under teacher
    forcing equals the first row's, and where they first differ."""
    first, rows = report.results[0], report.results[1:]
    for index, result in enumerate(rows, 1):
        pairs = [(a, b) for p, q in zip(first.samples, result.samples) for a, b in zip(p.greedy, q.greedy)]
        agreement = sum(a == b for a, b in pairs) / len(pairs)
        report.results[index] = dataclasses.replace(result, greedy_agreement=agreement)
        differ = [next((i for i, (a, b) in enumerate(zip(p.greedy, q.greedy)) if a != b), None)
                  for p, q in zip(first.samples, result.samples)]
        firsts = [i + 1 for i in differ if i is not None]
        report.notes.append(
            f"{result.backend}: greedy token equals {first.backend}'s at {100 * agreement:.1f}% of "
            f"{len(pairs)} positions; {len(differ) - len(firsts)} of {len(differ)} passages agree everywhere"
            + (f", the others first differ at token {min(firsts)}-{max(firsts)} (median "
               f"{sorted(firsts)[len(firsts) // 2]})" if firsts else ""))
