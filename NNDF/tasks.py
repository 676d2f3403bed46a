"""What a kind of model does with its inputs: which HF class loads it, its evaluator per action (what the action's
skeleton asks the kind), how prompts become model inputs, how a text is scored by teacher forcing.

`Task` is the contract every kind keeps; a family declares its task (`Family.task`) and the CLI, actions, model
loading and backends ask the task instead of testing the family. `GenerativeTask` adds what the shared
generation loop and the generative actions need. Kinds are packages of their own: `CausalLM.task.CausalLM`
(decoder-only), `Seq2Seq.task.Seq2SeqLM` adds an encoder whose inputs travel in `Prompt.encoder` and reach the
backend through `steps.start`; `Vision2Seq.task.ImageToText` reads images with that encoder; `Encoder.task.TextEncoder`
(embeddings, classification) generates nothing and brings its own evaluators (Encoder/evaluate/).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import torch

from NNDF.chat_template import token_batch
from NNDF.errors import UsageError
from NNDF.options import (BenchmarkGenerationOptions, CacheOptions, DecodingOptions, FusedStepOptions, MaskOptions,
                          MinLengthOptions, SamplerOptions, ScoringOptions)


@dataclass(frozen=True)
class Prompt:
    """What `generate` needs: the decoder's prompt (left padded) and, for encoder-decoder models, the encoder's
    named inputs (run once per prompt, before the first decoder step)."""

    input_ids: torch.Tensor  # [B, T]
    attention_mask: torch.Tensor  # [B, T]
    encoder: dict | None = None  # name -> tensor [B, ...]

    @property
    def batch(self) -> int:
        return self.input_ids.shape[0]


class Task(ABC):
    """How a kind of model is loaded, which parts it exports, which adapters serve it on each backend and how it
    runs each action (`evaluator`). One instance per kind (`CausalLM.task.CAUSAL_LM`, `Seq2Seq.task.SEQ2SEQ_LM`,
    `Encoder.task.TEXT_ENCODER`, ...); a family declares its task in `Family.task`. Shared code asks the task,
    never the family's name or kind."""

    kind: ClassVar[str]  # a label for messages and `list` (shared code never compares it)
    auto_class: ClassVar[str]  # the transformers class that loads the model (see `model_class`)
    padding_side: ClassVar[str]  # where padding goes in a batch of inputs
    static_cache_refusal: ClassVar[str | None] = None  # why --static-cache does not apply (None: it does)
    # why HF `generate`'s own static cache cannot be the benchmark's baseline for this kind (None: it can)
    hf_static_refusal: ClassVar[str | None] = None
    # the exported parts a generation step reads (None: all); an encoder runs once per input, not per token
    step_parts: ClassVar[tuple[str, ...] | None] = None
    # backend name -> "module:Class" of this kind's adapter there (what it exports, validates and runs; see
    # `NNDF.backends.base.Adapter`), loaded by `NNDF.registry`
    adapters: ClassVar[dict[str, str]] = {}
    does: ClassVar[str] = ""  # what its models do, in the line for an action it has no evaluator for
    evaluators: ClassVar[dict[str, str]] = {}  # action name -> "module:Class" of this kind's evaluator for it
    # the option groups only some kinds read that this kind adds (NNDF/options.py, `by_kind`): their flags are
    # shown and accepted for its families, refused for the others
    option_groups: ClassVar[tuple[type, ...]] = ()

    def once_per_input(self, model) -> list:
        """The modules of a loaded model that run once per input rather than per generated token (an encoder):
        their own weights are not part of what one step reads."""
        return []

    def model_class(self, source, options) -> str:
        """The transformers class that loads this run's model (`auto_class` unless the kind picks per checkpoint)."""
        return self.auto_class

    def evaluator(self, action: str) -> str | None:
        """The "module:Class" of the evaluator (`NNDF.evaluate.Evaluator`) that runs action `action` for this kind
        (`NNDF.registry.evaluator` loads it); None when the kind has none (the action's skeleton then says so in
        one line)."""
        return self.evaluators.get(action)

    @abstractmethod
    def parts(self, use_cache: bool) -> tuple[str, ...]:
        """The exported graphs / engines a run uses (names of the --<part>-onnx / --<part>-engine flags)."""

    @abstractmethod
    def items(self, options, texts: tuple, images_from: str = "--image") -> list:
        """The items of a run from `--prompt` texts (and `--image` files where the task reads images);
        `images_from` names where the images came from in messages (a dataset line's field: "image")."""


class GenerativeTask(Task):
    """A kind of model that generates tokens: prompts for the shared generation loop (NNDF/generation.py), HF
    `generate`'s arguments for the same inputs, teacher-forced scoring. `predict` is for encoders."""

    one_stream: ClassVar[bool]  # context and target are one token stream: any split of the same ids scores the same
    accuracy_refusal: ClassVar[str | None] = None  # why `accuracy` does not apply to this task (None: it does)
    does = "generate text"
    option_groups = (CacheOptions, FusedStepOptions, MaskOptions, DecodingOptions, SamplerOptions, MinLengthOptions,
                     BenchmarkGenerationOptions, ScoringOptions)

    # --- inputs: items are what a user gives (texts; image prompts for image-to-text) ---

    @abstractmethod
    def item_from_line(self, line: str):
        """Interactive chat: the item a line of input stands for."""

    @abstractmethod
    def sample_item(self, sample: dict):
        """A checkpoint.toml sample's input."""

    def shown(self, item) -> str:
        """An item as a table cell shows it (reports' JSON keeps `str(item)` whole)."""
        return str(item)

    @abstractmethod
    def special_ids(self, run) -> tuple[int | None, int | None]:
        """(EOS, pad) of generation."""

    @abstractmethod
    def prompts(self, run, items: list) -> Prompt:
        """Model inputs for these items (padding needs --use-mask)."""

    @abstractmethod
    def random_prompt(self, run, batch: int, length: int, generator: torch.Generator) -> Prompt:
        """Fresh random inputs of `length` tokens (the benchmark's)."""

    @abstractmethod
    def hf_generate_inputs(self, run, prompt: Prompt) -> dict:
        """Keyword arguments of HF `generate` for the same inputs (the outside reference)."""

    @abstractmethod
    def length_problem(self, run, prompt: int, new: int) -> str | None:
        """Why a prompt + generation of these lengths does not fit the model's position tables (None: it does).
        Indexing past a position table is a device-side assert on CUDA that poisons the process."""

    def prompt_length(self, prompt: Prompt) -> int:
        """The prompt length `length_problem` measures for these inputs: the text the encoder reads where the
        task has a text encoder (its `input_ids`, HF's name), else the decoder's prompt."""
        text = (prompt.encoder or {}).get("input_ids")
        return int((text if text is not None else prompt.input_ids).shape[1])

    # --- teacher-forced scoring (accuracy, run's perplexity) ---

    @abstractmethod
    def score_item(self, run, steps, item, target: list[int]) -> torch.Tensor:
        """log-softmax rows predicting each target token given an item [len(target), V]."""

    @abstractmethod
    def passage_ids(self, tokenizer, text: str) -> list[int]:
        """A text's ids as the task reads a passage."""

    @abstractmethod
    def split_passage(self, ids: list[int], k: int, eos: int | None) -> tuple[list[int], list[int], slice]:
        """(context, target, rows of the last k tokens) of a passage."""

    @abstractmethod
    def teacher_force(self, run, steps, context: list[int], target: list[int]) -> torch.Tensor:
        """log-softmax rows predicting each target token given the context and the targets before it."""


class TextItems:
    """Tasks whose items are texts: prompts, chat lines and checkpoint samples are strings."""

    def items(self, options, texts: tuple, images_from: str = "--image") -> list:
        if getattr(options, "image", ()):
            raise UsageError(f"{images_from} applies to image-to-text models; {self.kind} models read text")
        return list(texts)

    def item_from_line(self, line: str):
        return line

    def sample_item(self, sample: dict):
        return sample["input"]

    def special_ids(self, run) -> tuple[int | None, int | None]:
        return run.tokenizer.eos_token_id, run.tokenizer.pad_token_id

    def score_item(self, run, steps, item, target: list[int]) -> torch.Tensor:
        """The expected output's log-probabilities given a text item."""
        return self.teacher_force(run, steps, self.passage_ids(run.tokenizer, item), target)


def shared_positions_problem(run, prompt: int, new: int) -> str | None:
    """Why a prompt and its generation, which share one decoder's position table, do not fit it (None: they do)."""
    limit = run.source.dims.positions
    if limit and prompt + new > limit:
        return (f"--input-seq-len {prompt} + --output-seq-len {new} exceeds {run.source.variant}'s {limit} positions; "
                "shorten them")
    return None


def tokenize(run, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Padded ids and mask [B, T] on the tokenizer's padding side (texts, or prompts in the model's chat template:
    NNDF/chat_template.py); refuses empty prompts and, without --use-mask, prompts that need padding."""
    batch = token_batch(run.tokenizer, texts)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    if ids.shape[1] == 0:
        raise UsageError("empty prompt: nothing to generate from")
    if not bool(mask.all()) and not run.options.use_mask:
        raise UsageError("prompts of different lengths are padded: add --use-mask (or use --batch-size 1)")
    return ids, mask


def special_affixes(tokenizer) -> tuple[list[int], list[int]]:
    """The special ids the tokenizer puts before and after a text (e.g. [] and [</s>], or [<s>] and [</s>])."""
    bare = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a")["input_ids"]
    for start in range(len(full) - len(bare) + 1):
        if full[start: start + len(bare)] == bare:
            return full[:start], full[start + len(bare):]
    raise ValueError("the tokenizer's special tokens could not be located")  # internal: tokenizers keep the text

