"""`chat` for the generative kinds: prompts from `--prompt` (repeatable) or stdin, answered by every chosen backend side by side.

Interactive mode reads one prompt per line until `exit`, `quit` or end of input (also when stdin is a pipe), and
prints `<backend> (<s> s): <text>` for each backend as soon as it answers (the time before the answer, so nothing
the model writes can be taken for it; once: the report at the end gives the settings and notes, `--json` every
answer). All backends stay set up for the whole session, so only the first prompt pays for exports and loading.

Lengths: a prompt whose tokens plus the new tokens (--max-new-tokens, else the model's generation config) do not
fit the model's position table is refused, never truncated (cutting a prompt changes what is asked; an
encoder-decoder's instruction comes first). With `--prompt` every prompt is checked before any backend is set
up (one line, exit 2); in interactive mode the line is refused with a message saying how many tokens fit, and
the conversation goes on. Any other bad line (not UTF-8, a missing image, ...) is also one message, and the
conversation goes on; the `--json` report holds every answer.

Decoder models whose tokenizer has a chat template get their prompts in it (NNDF/chat_template.py; `--system`,
`--no-chat-template`): each `--prompt` is one user turn; interactive lines and answers are one conversation,
its oldest turns dropped whole when the next prompt would not fit; the line `/clear` starts a new one.
"""
from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass
from typing import Iterator

from NNDF.chat_template import ChatTemplateOptions, Conversation, Template, template_of, templated
from NNDF.decoding import report_settings
from NNDF.errors import HarnessError, UsageError
from NNDF.evaluate import Evaluator
from NNDF.generate_options import check_lengths
from NNDF.generation import GenerationConfig
from NNDF.options import ChatOptions, ModelOptions, SamplingOptions
from NNDF.results import Report, printable, say
from NNDF.session import decode, encode, generate_prompt, generation_config, torch_threads
from NNDF.timing import sync


@dataclass(frozen=True)
class ChatResult:
    backend: str
    prompt: str
    output_ids: tuple[int, ...]  # generated ids only
    text: str
    seconds: float

    def row(self) -> dict:
        prompt = self.prompt if len(self.prompt) <= 40 else self.prompt[:37] + "..."
        return {"backend": self.backend, "prompt": prompt, "text": self.text, "seconds": self.seconds}


QUIT = frozenset({"exit", "quit"})
CLEAR = "/clear"  # interactive: a new conversation (the history forgotten), as in other chat tools


def _lines() -> Iterator[tuple[int, str | None]]:
    """(line number, text) of stdin until end of input or Ctrl-C; text is None for a line that is not UTF-8."""
    if sys.stdin is None:  # started with stdin closed: nothing to read
        return
    interactive = sys.stdin.isatty()
    raw = getattr(sys.stdin, "buffer", None)  # bytes: a line that is not UTF-8 is refused alone
    number = 0
    while True:
        if interactive:
            print("Prompt: ", end="", file=sys.stderr, flush=True)
        try:
            line = raw.readline() if raw is not None else sys.stdin.readline()
        except KeyboardInterrupt:  # Ctrl-C at the prompt ends the conversation; the report keeps the answers
            print(file=sys.stderr)
            return
        if not line:
            return
        number += 1
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                say(f"error: line {number} is not UTF-8 text (byte {line[exc.start]:#04x} at {exc.start}); "
                    "skipped")
                yield number, None
                continue
        yield number, line.rstrip("\r\n")


def length_refusal(run, inputs, config: GenerationConfig) -> str | None:
    """Why these inputs plus the generation do not fit the model's position table (None: they do), with the
    longest prompt that would fit."""
    task = run.family.task
    length = task.prompt_length(inputs)
    new = config.new_tokens(inputs.input_ids.shape[1])  # --max-new-tokens, else the model's max_new_tokens / max_length
    if task.length_problem(run, length, new) is None:
        return None
    limit, variant = run.source.dims.positions, run.source.variant
    if task.length_problem(run, 1, new) is not None:
        return (f"{new} new tokens (--max-new-tokens, else the model's generation config) do not fit {variant}'s "
                f"{limit} positions: give a smaller --max-new-tokens")
    fits, over = 1, length  # the longest prompt that fits: length_problem is monotone in the prompt's length
    while over - fits > 1:
        middle = (fits + over) // 2
        fits, over = (middle, over) if task.length_problem(run, middle, new) is None else (fits, middle)
    return (f"the prompt is {length} tokens; with {new} new tokens {variant}'s {limit} positions take a prompt of at "
            f"most {fits} tokens: shorten it, or give a smaller --max-new-tokens")


def _prepare(run, item, config: GenerationConfig, which: str = ""):
    """Model inputs for one item, refused (UsageError) when they do not fit the model."""
    inputs = encode(run, [item])
    refusal = length_refusal(run, inputs, config)
    if refusal:
        raise UsageError(which + refusal)
    return inputs


def _answer(run, opened, item, inputs, config: GenerationConfig, report: Report) -> None:
    for name, backend, steps in opened:
        with torch_threads(run, backend):  # this backend's own torch threads (all stay open at once)
            sync(run.device)
            start = time.perf_counter()
            out = generate_prompt(steps, inputs, config)
            sync(run.device)
            seconds = time.perf_counter() - start
        new = out.new_tokens(0, config.eos_token_id)
        result = ChatResult(name, str(item), tuple(new), decode(run, new), seconds)
        shown = printable(result.text, keep="\n\t")  # an answer keeps its lines; control characters are escaped
        print(f"{name} ({seconds:.4f} s): {shown}", flush=True)
        report.results.append(result)


def _conversation(run, opened, config: GenerationConfig, report: Report, template: Template | None = None) -> None:
    """Interactive: one item per stdin line; a bad line is one message and the conversation goes on. With a chat
    template, the lines and the first backend's answers are one conversation (NNDF/chat_template.py)."""
    task = run.family.task
    refusal = lambda item: length_refusal(run, encode(run, [item]), config)  # noqa: E731
    history = Conversation(template, refusal) if template else None
    print("Welcome to the HuggingFace demo chat box! Type your prompts; 'exit' or 'quit' ends"
          + (f"; '{CLEAR}' starts a new conversation." if history else "."), file=sys.stderr)
    for number, line in _lines():
        if line is None or not line.strip():
            continue
        said = line.strip().lower()
        if said in QUIT:
            return
        if said == CLEAR:
            if history:
                history.clear()
            say("note: a new conversation: the turns before are forgotten" if history else
                f"note: {CLEAR}: no conversation to clear (without a chat template every line is its own prompt)")
            continue
        try:
            item = task.item_from_line(line)
            item = history.ask(item) if history else item  # the oldest turns dropped until it fits
            _answer(run, opened, item, _prepare(run, item, config), config, report)
            if history:
                history.answered(report.results[-len(opened)].text)  # the first backend's answer to this line
        except KeyboardInterrupt:  # Ctrl-C while answering ends the conversation; the report keeps the answers
            say("interrupted: the conversation ends")
            return
        except HarnessError as exc:
            say(f"error: line {number}: {exc}")
        except Exception as exc:  # noqa: BLE001 - a conversation survives any line; --verbose shows the cause
            logging.getLogger(__name__).debug("line %d failed", number, exc_info=True)
            say(f"error: line {number} failed ({exc.__class__.__name__}: {exc}); the conversation goes on")


class Chat(Evaluator):
    """`chat` for the generative kinds: every backend stays set up; each item is answered by all of them."""

    together = True

    def __init__(self, action: str, options: ModelOptions, sampling: SamplingOptions, chat_opts: ChatOptions,
                 template: ChatTemplateOptions = ChatTemplateOptions()) -> None:
        super().__init__(action, options, sampling, chat_opts, template)
        self.sampling, self.chat, self.template_options = sampling, chat_opts, template

    def check(self, task) -> None:
        check_lengths(self.sampling.min_new_tokens, self.chat.max_new_tokens)
        if any(not p.strip() for p in self.chat.prompt):
            raise UsageError("empty --prompt: nothing to generate from")

    def begin(self, run, report) -> None:
        options = self.options
        self.config = config = generation_config(run, self.sampling, self.chat.max_new_tokens)
        report.live = True  # each answer is printed as it comes (`_answer`); the report's table would repeat them
        report.after_lines = True
        report.settings = {
            "device": run.device.type, "precision": options.precision,
            "max_new_tokens": config.max_new_tokens or f"max_length {config.max_length}",
            **report_settings(options, config)}
        self.interactive = not (self.chat.prompt or options.image)
        self.template = template_of(run, self.template_options)  # None: the text as it is
        # --prompt / --image: every item checked (tokens, images, lengths) before any backend is set up
        items = [] if self.interactive else run.family.task.items(run.options, self.chat.prompt)
        items = templated(self.template, items)
        self.prepared = [(item, _prepare(run, item, config, f"prompt {n} of {len(items)}: " if len(items) > 1 else ""))
                         for n, item in enumerate(items, 1)]

    def evaluate(self, run, name: str, backend, steps, report):
        return backend, steps

    def end(self, run, report, outcomes: list) -> None:
        opened = [(name, backend, steps) for name, (backend, steps) in outcomes]
        if self.interactive:
            _conversation(run, opened, self.config, report, self.template)
        for item, inputs in self.prepared:
            _answer(run, opened, item, inputs, self.config, report)
