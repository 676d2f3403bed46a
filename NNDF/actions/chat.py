"""`chat`: prompts from `--prompt` (repeatable) or stdin, answered by every chosen backend side by side.

Interactive mode reads one prompt per line until `exit` or end of input (also when stdin is a pipe), and
prints `<backend>: <text>. Time: <s>s` for each backend as soon as it answers. All backends stay set up for
the whole session, so only the first prompt pays for exports and loading.
"""
from __future__ import annotations

import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass

from NNDF.actions.common import (backend_steps, decode, encode, finish, generate_prompt, generation_config,
                                 note_export_check, open_run)
from NNDF.errors import UsageError
from NNDF.options import ChatOptions, ModelOptions, SamplingOptions, OptionGroup
from NNDF.results import Report, environment
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


def _prompts(run, chat_opts: ChatOptions):
    """Items to answer: --prompt texts (and --image files for image-to-text), else one per stdin line."""
    task = run.family.task
    if chat_opts.prompt or run.options.image:
        yield from task.items(run.options, chat_opts.prompt)
        return
    interactive = sys.stdin.isatty()
    print("Welcome to the HuggingFace demo chat box! Type your prompts; 'exit' quits.", file=sys.stderr)
    while True:
        if interactive:
            print("Prompt: ", end="", file=sys.stderr, flush=True)
        line = sys.stdin.readline()
        if not line or line.strip() == "exit":
            return
        if line.strip():
            yield task.item_from_line(line.rstrip("\n"))


def chat(family: str, backends: tuple[str, ...], options: ModelOptions, sampling: SamplingOptions,
         chat_opts: ChatOptions, *backend_options: OptionGroup) -> Report:
    if any(not p.strip() for p in chat_opts.prompt):
        raise UsageError("empty --prompt: nothing to generate from")
    run = open_run(family, options, backends, *backend_options)
    config = generation_config(run, sampling, chat_opts.max_new_tokens)
    report = Report("chat", run.family.name, run.source.variant, {
        "device": run.device.type, "precision": options.precision, "max_new_tokens": config.max_new_tokens or f"max_length {config.max_length}",
        "use_cache": options.use_cache, "num_beams": config.num_beams, "do_sample": config.sampling.do_sample},
        environment=environment(run.device))
    with ExitStack() as stack:
        opened = []
        for name in backends:
            if sys.stderr.isatty():
                print(f"Setting up environment for {name}", file=sys.stderr)
            backend, steps = stack.enter_context(backend_steps(run, name))
            note_export_check(report, name, backend)
            opened.append((name, steps))
        for prompt in _prompts(run, chat_opts):
            inputs = encode(run, [prompt])
            for name, steps in opened:
                sync(run.device)
                start = time.perf_counter()
                out = generate_prompt(steps, inputs, config)
                sync(run.device)
                seconds = time.perf_counter() - start
                new = out.new_tokens(0, config.eos_token_id)
                result = ChatResult(name, str(prompt), tuple(new), decode(run, new), seconds)
                print(f"{name}: {result.text}. Time: {seconds:.4f}s", flush=True)
                report.results.append(result)
    finish(run)
    return report
