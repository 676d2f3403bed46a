"""`generate`: batches of the user's own prompts (`--prompt` or `--dataset FILE.jsonl`), every chosen backend, one
in memory at a time (the generative kinds' evaluator: NNDF/evaluate/generate.py)."""
from __future__ import annotations

from NNDF.actions.skeleton import run_action
from NNDF.chat_template import ChatTemplateOptions
from NNDF.generate_options import GenerateOptions
from NNDF.options import ModelOptions, OptionGroup, SamplingOptions
from NNDF.results import Report


def generate(family: str, backends: tuple[str, ...], options: ModelOptions, sampling: SamplingOptions,
             gen: GenerateOptions, template: ChatTemplateOptions = ChatTemplateOptions(),
             *backend_options: OptionGroup) -> Report:
    """`generate`: one row per prompt and backend, then each backend's tokens per second."""
    return run_action("generate", family, backends, options, (sampling, gen, template), backend_options)
