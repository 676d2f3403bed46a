"""Chat templates: `chat` and `generate` send a decoder model's prompts through its tokenizer's chat template.

A tokenizer with a `chat_template` (instruction-tuned models) turns a conversation (an optional system prompt,
then user and assistant turns) into the ids the model was trained on: `apply_chat_template(messages,
add_generation_prompt=True)`, so the model answers as the assistant. `template_of(run, options)` decides per run:
the template when the tokenizer has one and the kind reads this group (decoder-only models), else None (the text
is sent as it is, as `--no-chat-template` asks); `--system` for a model without a template is refused in one
line. `benchmark` and `accuracy` never come here: their inputs are raw tokens.

A templated prompt is a `Templated` item: the user's text (what tables and JSON show) and the template's ids
(what the model reads; `token_batch` pads them as the tokenizer pads texts). Interactive `chat` keeps a
`Conversation`: each answer joins the history, and when the next prompt with the history would not fit the
model's positions with the new tokens, the oldest turns are dropped whole (a one-line note; the system prompt
stays); a line that does not fit even alone is refused and the history is kept.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from NNDF.errors import UsageError
from NNDF.option_group import OptionGroup, flag
from NNDF.results import say


@dataclass(frozen=True)
class ChatTemplateOptions(OptionGroup):
    title = "chat template (decoder-only models)"
    owner = "decoder-only models"
    by_kind = True  # a decoder-only kind adds it (CausalLM/task.py); other kinds send their text as it is
    system: str | None = flag(None, "--system", help="a system prompt, first in the model's chat template (refused for a model whose tokenizer has no chat template)")
    no_chat_template: bool = flag(False, "--no-chat-template", help="send each prompt's text as it is, without the tokenizer's chat template (a model without a template always does)")

    def check(self):
        if self.system is not None and self.no_chat_template:
            raise UsageError("--system is a message of the chat template: drop --no-chat-template, or --system")
        if self.system is not None and not self.system.strip():
            raise UsageError("empty --system: give the system prompt's text, or drop the flag")


@dataclass(frozen=True)
class Templated:
    """A prompt in the model's chat template."""

    message: str  # the user's last message: what results show
    ids: tuple[int, ...]  # apply_chat_template(system, history, message; add_generation_prompt=True)

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class Template:
    """A run's chat template: the tokenizer that has it and the system prompt (None: none)."""

    tokenizer: object
    system: str | None = None

    def prompt(self, message: str, history: tuple[tuple[str, str], ...] = ()) -> Templated:
        """`message` after the system prompt and the (user, assistant) turns of `history`, oldest first."""
        messages = [{"role": "system", "content": self.system}] if self.system is not None else []
        for user, assistant in history:
            messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
        messages.append({"role": "user", "content": message})
        try:
            ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)
        except Exception as exc:  # noqa: BLE001 - a template raises what it refuses (roles, order): one line
            raise UsageError(f"the model's chat template refused the conversation ({exc.__class__.__name__}: "
                             f"{exc}); --no-chat-template sends the text as it is") from exc
        return Templated(message, tuple(int(i) for i in ids))


def template_of(run, options: ChatTemplateOptions) -> Template | None:
    """The run's chat template, or None: --no-chat-template, a kind that does not read this group, or a tokenizer
    without a template (then --system is refused: there is nowhere to put it)."""
    if options.no_chat_template or ChatTemplateOptions not in run.family.task.option_groups:
        return None
    if run.tokenizer.chat_template:
        return Template(run.tokenizer, options.system)
    if options.system is not None:
        raise UsageError(f"--system needs a chat template, and {run.source.variant}'s tokenizer has none: drop "
                         "--system (the prompt is sent as raw text)")
    return None


def templated(template: Template | None, items: list) -> list:
    """Each text item as its single-turn templated prompt (unchanged without a template)."""
    return list(items) if template is None else [template.prompt(item) for item in items]


def token_batch(tokenizer, items: list):
    """The tokenizer's batch (`input_ids`, `attention_mask` [B, T] tensors) of texts, or of templated prompts (their
    ids, padded on the tokenizer's side as its texts are)."""
    if not any(isinstance(item, Templated) for item in items):
        return tokenizer(list(items), return_tensors="pt", padding=True)
    assert all(isinstance(item, Templated) for item in items), "a batch is templated or not, never both"
    return tokenizer.pad({"input_ids": [list(item.ids) for item in items]}, return_tensors="pt")


class Conversation:
    """Interactive chat's history in the model's chat template, kept within the model's positions.

    `refusal(item)` says why a templated prompt does not fit the model's positions with the new tokens (None: it
    fits): `ask` drops the oldest turns whole until the prompt fits, or refuses the line (UsageError) when it does
    not fit even alone; `answered` adds the answer and its question to the history.
    """

    def __init__(self, template: Template, refusal: Callable[[Templated], str | None]) -> None:
        self.template, self.refusal = template, refusal
        self.turns: list[tuple[str, str]] = []  # (user, assistant), oldest first
        self.asked: str | None = None  # the message being answered

    def ask(self, message: str) -> Templated:
        for dropped in range(len(self.turns) + 1):  # the last try: the message alone
            item = self.template.prompt(message, tuple(self.turns[dropped:]))
            problem = self.refusal(item)
            if problem is None:
                break
        else:
            raise UsageError(f"{problem} (the line alone in the chat template"
                             f"{', after --system' if self.template.system is not None else ''}; the conversation "
                             "so far is kept)")
        if dropped:
            kept = len(self.turns) - dropped
            say(f"note: dropped the oldest {dropped} turn{'s' * (dropped > 1)} of the conversation to fit the "
                f"model's positions with the new tokens ({kept} kept"
                f"{', and the system prompt' if self.template.system is not None else ''})")
            del self.turns[:dropped]
        self.asked = message
        return item

    def clear(self) -> None:
        """A new conversation: the turns so far are forgotten (the system prompt stays)."""
        self.turns.clear()
        self.asked = None

    def answered(self, answer: str) -> None:
        """The answer to the last `ask` joins the history (a line that failed is never asked again)."""
        if self.asked is not None:
            self.turns.append((self.asked, answer))
            self.asked = None
