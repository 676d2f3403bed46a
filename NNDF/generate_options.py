"""The `generate` action's own option group: where the prompts come from and how long each generation may be.

The batch (`--batch-size`, `--use-mask`), the model, the images (`--image`) and the decoding flags are the
shared groups' (NNDF/options.py); this group holds only what `generate` alone reads.
"""
from __future__ import annotations

from dataclasses import dataclass

from NNDF.errors import UsageError
from NNDF.options import OptionGroup, flag


@dataclass(frozen=True)
class GenerateOptions(OptionGroup):
    title = "generate"
    owner = "generate"
    prompt: tuple = flag((), "--prompt", action="append", help="a prompt to continue (repeatable; image-to-text models: a text prefix for every --image)")
    dataset: str | None = flag(None, "--dataset", help="a JSONL file, one prompt per line: \"text\" (image-to-text models: \"image\", a path relative to the file, and an optional \"text\"), and an optional \"max_new_tokens\" of its own")
    max_new_tokens: int | None = flag(None, "--max-new-tokens", type=int, help="most tokens to generate per prompt (a dataset line's own max_new_tokens wins; default: the model's generation config's max_new_tokens or max_length, else 32)")

    def check(self):
        if self.prompt and self.dataset:
            raise UsageError("--prompt and --dataset are alternatives: give one")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise UsageError(f"--max-new-tokens must be >= 1, got {self.max_new_tokens}")


def check_lengths(min_new_tokens: int | None, max_new_tokens: int | None) -> None:
    """--min-new-tokens above --max-new-tokens asks for the impossible: refused before anything loads."""
    if min_new_tokens is not None and max_new_tokens is not None and min_new_tokens > max_new_tokens:
        raise UsageError(f"--min-new-tokens {min_new_tokens} is above --max-new-tokens {max_new_tokens}: give at "
                         f"most {max_new_tokens}")
