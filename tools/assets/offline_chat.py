"""Chat conversations made from the offline corpus, to teach the offline Llama its chat format.

Every section of a *training* pydoc topic (``offline_corpus.train_documents``: the held-out topics behind the
held-out perplexity and ``data/lambada_offline.jsonl`` are never used) gives one question/answer pair: the
question names the section's heading ("Explain the "for" statement.", "What are value comparisons?"), the answer
is the first natural-language sentences of the section (at most ``MAX_ANSWER_WORDS`` words; the sentence filter
is the LAMBADA builder's). Each pair is asked in a few phrasings, under one of a few system messages or none;
some conversations chain two pairs, so the model also sees a history. A handful of written small-talk turns
("Hello!", "Who are you?") make the first message of a chat less surprising.

Conversations are lists of ``{"role", "content"}`` messages, rendered by the tokenizer's own chat template, so
training text and ``chat`` prompts have exactly the same format. Deterministic for a given seed.
"""

from __future__ import annotations

import random
import re

from make_lambada_offline import prose_runs
from offline_corpus import PYDOC_TOPICS, train_documents

MAX_ANSWER_WORDS = 50
OPENING_CHARS = 400  # the answer must start this close to the top of its section
PHRASINGS_PER_PAIR = 3
TWO_TURN_SHARE = 0.25

SYSTEM_PROMPTS = (
    None,
    "You are a helpful assistant.",
    "You are a helpful assistant who answers questions about Python.",
    "Answer in a few sentences.",
)
# {what} is "What is" or "What are", chosen by the heading's head noun.
QUESTIONS = ("{what} {subject}?", "Explain {subject}.", "Tell me about {subject}.", "Can you describe {subject}?")
SMALL_TALK = (
    ("Hello!", "Hello! Ask me about Python: its statements, expressions, types and data model."),
    ("Hi", "Hi! What would you like to know about Python?"),
    ("Who are you?", "I am a small language model trained offline on Python's help text. I answer questions "
                     "about the Python language."),
    ("What can you do?", "I can explain Python's statements, expressions, built-in types and special methods."),
    ("Thank you!", "You are welcome."),
    ("Thanks", "You are welcome. Ask me anything else about Python."),
)
SMALL_TALK_REPEATS = 8

_UNDERLINE = re.compile(r"^[*=\-~^]{3,}$")
_KEEP_CASE = {"Python", "None", "True", "False", "Ellipsis", "Unicode", "I/O"}


def sections(text: str) -> list[tuple[str, str]]:
    """(heading, body) for every underlined heading of a pydoc topic, in order."""
    lines = text.splitlines()
    starts = [i - 1 for i in range(1, len(lines))
              if _UNDERLINE.match(lines[i].strip()) and lines[i - 1].strip()
              and abs(len(lines[i].strip()) - len(lines[i - 1].strip())) <= 2]
    bounds = starts + [len(lines)]
    return [(lines[s].strip(), "\n".join(lines[s + 2 : e])) for s, e in zip(bounds, bounds[1:])]


def subject(heading: str) -> str:
    """The heading as it reads inside a sentence: 'Code Objects' -> 'code objects', 'The "for" statement' ->
    'the "for" statement'; quoted names and proper nouns keep their case."""
    words = heading.split()
    for i, word in enumerate(words):
        if word not in _KEEP_CASE and word[:1].isupper() and word[1:].islower():
            words[i] = word.lower()
    return " ".join(words)


def is_plural(heading: str) -> bool:
    """Whether the head noun (the last word before ' of ', if any) is plural: 'Value comparisons' yes,
    'Binding of names' no; an activity ('Emulating numeric types') is singular."""
    if heading.split()[0].endswith("ing"):
        return False
    head = heading.split(" of ")[0].split()[-1].strip('"').lower()
    return head.endswith("s") and not head.endswith(("ss", "us", "is"))


def answer(body: str) -> str | None:
    """The section's opening prose sentences, up to MAX_ANSWER_WORDS words (at least one sentence), or None if the
    section does not open with prose. A lead-in to code ("... as follows:") ends the answer, as a full stop."""
    runs = prose_runs(body)
    if not runs or runs[0][0][:40] not in " ".join(body.split())[:OPENING_CHARS]:
        return None  # the first prose is deep in the section: not an answer to its heading
    kept: list[str] = []
    for sentence in runs[0]:
        if kept and len(" ".join(kept + [sentence]).split()) > MAX_ANSWER_WORDS:
            break
        kept.append(sentence)
        if sentence.endswith(":"):
            break
    text = " ".join(kept)
    if text.endswith(":"):
        text = text[:-1] + "."
    if text.endswith(("i.e.", "e.g.")) or len(text.split()) > 2 * MAX_ANSWER_WORDS:
        return None
    return text


def question_answer_pairs() -> list[tuple[str, str, bool]]:
    """(subject, answer, plural) for every section of the training pydoc topics that has prose."""
    pairs, seen = [], set()
    for name, text in train_documents():
        if name not in PYDOC_TOPICS:
            continue  # the licenses: no headings worth asking about
        for heading, body in sections(text):
            reply = answer(body)
            if reply and heading not in seen:
                seen.add(heading)  # topics repeat each other's sections; ask once
                pairs.append((subject(heading), reply, is_plural(heading)))
    return pairs


def _turns(pair: tuple[str, str, bool], rng: random.Random) -> list[dict]:
    what_subject, reply, plural = pair
    question = rng.choice(QUESTIONS).format(what="What are" if plural else "What is", subject=what_subject)
    return [{"role": "user", "content": question[0].upper() + question[1:]}, {"role": "assistant", "content": reply}]


def conversations(seed: int) -> list[list[dict]]:
    """Every pair asked PHRASINGS_PER_PAIR times (some chained with another pair), plus the small talk."""
    rng = random.Random(seed)
    pairs = question_answer_pairs()
    convs = []
    for pair in pairs * PHRASINGS_PER_PAIR:
        system = rng.choice(SYSTEM_PROMPTS)
        messages = [{"role": "system", "content": system}] if system else []
        messages += _turns(pair, rng)
        if rng.random() < TWO_TURN_SHARE:
            messages += _turns(rng.choice(pairs), rng)
        convs.append(messages)
    for question, reply in SMALL_TALK * SMALL_TALK_REPEATS:
        system = rng.choice(SYSTEM_PROMPTS)
        messages = [{"role": "system", "content": system}] if system else []
        convs.append(messages + [{"role": "user", "content": question}, {"role": "assistant", "content": reply}])
    rng.shuffle(convs)
    return convs


if __name__ == "__main__":
    # A look at the pairs: `python tools/assets/offline_chat.py`
    all_pairs = question_answer_pairs()
    print(f"{len(all_pairs)} question/answer pairs, {len(conversations(4))} conversations")
    for pair in all_pairs[:: max(1, len(all_pairs) // 12)]:
        print(f"- {pair[0]!r} ({'plural' if pair[2] else 'singular'}): {pair[1][:120]!r}")
