"""What a kind of model does with text: which HF class loads it, how prompts become model inputs, how a text is
scored by teacher forcing.

A family declares its task (`Family.task`); actions and model loading ask the task instead of testing the
family's kind. `CausalLM` (decoder-only: GPT-2, OPT, BLOOM) lives here; `Seq2Seq.task.Seq2SeqLM` adds an
encoder whose inputs travel in `Prompt.encoder` and reach the backend through `steps.start`.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from NNDF.errors import UsageError
from NNDF.steps import position_ids_from_mask


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


def learned_positions(config) -> int | None:
    """Size of a model's learned position table (None: relative positions or ALiBi, no table)."""
    for attr in ("n_positions", "max_position_embeddings"):
        value = getattr(config, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


class CausalLM:
    """Decoder-only language models: the prompt is the decoder's input."""

    kind = "decoder"
    auto_class = "AutoModelForCausalLM"
    padding_side = "left"  # new tokens follow the last real token of every row
    one_stream = True  # context and target are one token stream: any split of the same ids scores the same

    accuracy_refusal = None  # why `accuracy` does not apply to this task (None: it does)

    def parts(self, use_cache: bool) -> tuple[str, ...]:
        """The exported graphs / engines a run uses (names of the --<part>-onnx / --<part>-engine flags)."""
        return ("decoder",)

    # --- inputs: items are what a user gives (texts here; ImagePrompt for image-to-text) ---

    def items(self, options, texts: tuple) -> list:
        if getattr(options, "image", ()):
            raise UsageError("--image applies to image-to-text families (BLIP)")
        return list(texts)

    def item_from_line(self, line: str):
        return line

    def sample_item(self, sample: dict):
        """A checkpoint.toml sample's input."""
        return sample["input"]

    def special_ids(self, run) -> tuple[int | None, int | None]:
        """(EOS, pad) of generation."""
        return run.tokenizer.eos_token_id, run.tokenizer.pad_token_id

    def hf_generate_inputs(self, run, prompt: Prompt) -> dict:
        """Keyword arguments of HF `generate` for the same inputs (the outside reference)."""
        return {"input_ids": prompt.input_ids, "attention_mask": prompt.attention_mask,
                "pad_token_id": self.special_ids(run)[1]}

    def score_item(self, run, steps, item, target: list[int]) -> torch.Tensor:
        """log-softmax rows predicting each target token given an item (the expected output's perplexity)."""
        return self.teacher_force(run, steps, self.passage_ids(run.tokenizer, item), target)

    def prompts(self, run, texts: list[str]) -> Prompt:
        """Left-padded ids and mask; padding requires --use-mask (without a mask it would be wrong)."""
        ids, mask = tokenize(run, texts)
        return Prompt(ids, mask)

    def position_config(self, run):
        """The config whose learned positions bound the prompt plus the generation (image-to-text: the text
        decoder's)."""
        return run.source.config

    def length_problem(self, run, prompt: int, new: int) -> str | None:
        """Why a prompt + generation of these lengths does not fit the model's learned positions (None: it
        does). Indexing past the position table is a device-side assert on CUDA that poisons the process."""
        limit = learned_positions(self.position_config(run))
        if limit and prompt + new > limit:
            return (f"--input-seq-len {prompt} + --output-seq-len {new} exceeds {run.source.variant}'s {limit} "
                    "positions; shorten them")
        return None

    def random_prompt(self, run, batch: int, length: int, generator: torch.Generator) -> Prompt:
        ids = torch.randint(0, run.source.config.vocab_size, (batch, length), generator=generator).to(run.device)
        return Prompt(ids, torch.ones_like(ids))

    def passage_ids(self, tokenizer, text: str) -> list[int]:
        """A text's ids as the model reads a context (with the tokenizer's specials, e.g. OPT's leading </s>)."""
        return tokenizer(text)["input_ids"]

    def split_passage(self, ids: list[int], k: int, eos: int | None) -> tuple[list[int], list[int], slice]:
        """(context, target, rows of the last k tokens): one pass scores every token after the first."""
        return ids[:1], ids[1:], slice(len(ids) - 1 - k, None)

    def teacher_force(self, run, steps, context: list[int], target: list[int]) -> torch.Tensor:
        """log-softmax rows predicting each target token given the context and the targets before it
        [len(target), V] (one forward pass, no sampling)."""
        x = torch.tensor([context + target], device=steps.device)
        mask = torch.ones_like(x)
        logits, _ = steps.forward(x, mask, position_ids_from_mask(mask), steps.new_cache(1, x.shape[1]))
        return torch.log_softmax(logits[0, len(context) - 1: -1].float(), dim=-1)


def tokenize(run, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Padded ids and mask [B, T] on the tokenizer's padding side; refuses empty prompts and, without
    --use-mask, prompts that need padding."""
    batch = run.tokenizer(list(texts), return_tensors="pt", padding=True)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    if ids.shape[1] == 0:
        raise UsageError("empty prompt: nothing to generate from")
    if not bool(mask.all()) and not run.options.use_mask:
        raise UsageError("prompts of different lengths are padded: add --use-mask (or use --batch-size 1)")
    return ids, mask


def special_affixes(tokenizer) -> tuple[list[int], list[int]]:
    """The special ids the tokenizer puts before and after a text (T5: [] and [</s>]; BART: [<s>] and [</s>])."""
    bare = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a")["input_ids"]
    for start in range(len(full) - len(bare) + 1):
        if full[start: start + len(bare)] == bare:
            return full[:start], full[start + len(bare):]
    raise ValueError("the tokenizer's special tokens could not be located")  # internal: tokenizers keep the text


CAUSAL_LM = CausalLM()
