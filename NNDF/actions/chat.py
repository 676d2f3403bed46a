"""`chat`: prompts from `--prompt` or stdin, every chosen backend set up at once and answering side by side
(the generative kinds' evaluator: NNDF/evaluate/chat.py)."""
from __future__ import annotations

from NNDF.actions.skeleton import run_action
from NNDF.chat_template import ChatTemplateOptions
from NNDF.options import ChatOptions, ModelOptions, OptionGroup, SamplingOptions
from NNDF.results import Report


def chat(family: str, backends: tuple[str, ...], options: ModelOptions, sampling: SamplingOptions,
         chat_opts: ChatOptions, template: ChatTemplateOptions = ChatTemplateOptions(),
         *backend_options: OptionGroup) -> Report:
    return run_action("chat", family, backends, options, (sampling, chat_opts, template), backend_options)
