"""Build ``data/lambada_offline.jsonl``: an offline LAMBADA-style last-word dataset.

LAMBADA (``{"text": passage}`` per line) asks a model to predict the final word of
a passage from its context.  The real dataset needs the Hub, so this builds a
small stand-in from the *held-out* pydoc topics of ``tools/assets/offline_corpus.py``,
i.e. text the offline GPT-2 (``tools/assets/make_offline_gpt2.py``) never trained on.

Each passage is a run of whole, consecutive prose sentences from one topic
(30-90 words, whitespace normalised to single spaces; code, grammar rules,
headings and punctuation-heavy sentences break a run).  Its last sentence ends
in a plain ASCII word whose full stop is removed, so the passage ends in the
target word, as in LAMBADA.  Every sentence is the target of at most one
passage; the preceding sentences are context and may be shared by neighbours.

Deterministic: the output depends only on the corpus split; rebuild with
    .venv/bin/python tools/assets/make_lambada_offline.py
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from offline_corpus import eval_documents, paragraphs  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO_ROOT / "data" / "lambada_offline.jsonl"

MIN_WORDS, MAX_WORDS = 30, 90
CONTEXT_WORDS = 45  # grow the context backwards until the passage has about this many words
TARGET_PASSAGES = 200
MAX_BYTES = 200 * 1024

# An English word, optionally quoted/bracketed and followed by ordinary punctuation.
_PLAIN_WORD = re.compile(r"^[(“\"'‘]?[A-Za-z][A-Za-z'’-]*[.,;:!?)”\"'’]*$")
# Sentence boundary: end punctuation, optional closing quote/bracket, space, capital letter.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z“\"])|(?<=[.!?][\"”’)])\s+(?=[A-Z“\"])")
# A target sentence ends in a bare word and full stop (not a lead-in ":" or a closing
# quote/bracket, whose opening half would be left dangling once the punctuation is cut).
_TARGET_END = re.compile(r"\s[A-Za-z]+[.!?]$")
_CODE_MARKERS = (">>>", "::=", "...:", "()", "[]", "{}", "==", "->", "__")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def paragraph_text(raw: str) -> str | None:
    """Flatten one pydoc paragraph to a single line of text, or None if it is not prose."""
    lines = raw.strip("\n").splitlines()
    if any(set(line.strip()) <= set("*=-~^") for line in lines):
        return None  # section heading with its underline, or a table rule
    first = lines[0].lstrip()
    if first.startswith(("* ", "- ")):
        lines[0] = first[2:]  # list item: the item text itself is prose
    elif len(lines) > 1 and _indent(lines[1]) > _indent(lines[0]):
        lines = lines[1:]  # definition list: drop the term line, keep its indented body
    return " ".join(" ".join(lines).split())


def is_natural(sentence: str, min_plain: float = 0.8) -> bool:
    """Mostly plain words: rejects code fragments, tables and punctuation-heavy text."""
    if any(marker in sentence for marker in _CODE_MARKERS):
        return False  # code samples, grammar rules and dunder-heavy reference text
    words = sentence.split()
    plain = sum(bool(_PLAIN_WORD.match(w)) for w in words)
    return len(words) >= 4 and plain / len(words) >= min_plain and sentence[-1] in ".!?:"


def prose_runs(text: str) -> list[list[str]]:
    """Runs of consecutive natural sentences; any non-prose paragraph or sentence breaks a run."""
    runs: list[list[str]] = [[]]
    for raw in paragraphs(text):
        flat = paragraph_text(raw)
        sentences = _SENTENCE_END.split(flat) if flat else []
        if not sentences:
            runs.append([])
            continue
        for sentence in sentences:
            if is_natural(sentence):
                runs[-1].append(sentence)
            elif runs[-1]:
                runs.append([])
    return [run for run in runs if run]


def final_word(sentence: str) -> str | None:
    """The sentence's last word without its full stop, if it is a plain ASCII word."""
    return sentence.split()[-1][:-1] if _TARGET_END.search(sentence) else None


def passages_from_run(run: list[str]) -> list[str]:
    """One passage per usable target sentence: it plus just enough preceding context."""
    passages = []
    for end, target in enumerate(run):
        word = final_word(target)
        if word is None:
            continue
        start, n_words = end, len(target.split())
        while start > 0 and n_words < CONTEXT_WORDS and n_words + len(run[start - 1].split()) <= MAX_WORDS:
            start -= 1
            n_words += len(run[start].split())
        if not MIN_WORDS <= n_words <= MAX_WORDS:
            continue
        words = " ".join(run[start : end + 1]).split()
        words[-1] = word  # drop the trailing punctuation so the passage ends in the bare word
        passages.append(" ".join(words))
    return passages


def thin_evenly(items: list[str], target: int) -> list[str]:
    """Keep ``target`` items spread evenly over the list (less overlap between neighbours)."""
    if len(items) <= target:
        return items
    return [items[i * len(items) // target] for i in range(target)]


def build_passages() -> list[str]:
    candidates: list[str] = []
    seen: set[str] = set()
    for _, text in eval_documents():  # sorted topic order -> deterministic output
        for run in prose_runs(text):
            for passage in passages_from_run(run):
                if passage not in seen:  # held-out topics may quote each other
                    seen.add(passage)
                    candidates.append(passage)
    return thin_evenly(candidates, TARGET_PASSAGES)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()

    passages = build_passages()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as f:
        for passage in passages:
            f.write(json.dumps({"text": passage}, ensure_ascii=False) + "\n")

    size = args.out.stat().st_size
    assert size <= MAX_BYTES, f"{args.out} is {size} bytes, over the 200 KB budget"
    lengths = [len(p.split()) for p in passages]
    print(f"wrote {len(passages)} passages to {args.out} ({size / 1024:.1f} KB), "
          f"{min(lengths)}-{max(lengths)} words, mean {sum(lengths) / len(lengths):.0f}")


if __name__ == "__main__":
    main()
