"""A run's lifetime, shared by every action and by serving: opening a run (the family, the named backends and the
flags naming the user's files checked first), each backend's steps from setup to close, the model's inputs for
items, the generation call, and the cleanup after. Actions (NNDF/actions/) and serving (NNDF/triton/) both use it,
so serving imports no action."""
from __future__ import annotations

from contextlib import contextmanager, nullcontext
from typing import Callable, Iterator, Sequence

import torch


from NNDF.backends.base import Backend
from NNDF.context import RunContext, make_context
from NNDF.family import Family
from NNDF.generation import GenerationConfig, GenerationOutput, Observer, generate
from NNDF.options import ModelOptions, OptionGroup, SamplingOptions
from NNDF.parts import given_parts
from NNDF.steps import GenerativeSteps


def open_run(family: Family, options: ModelOptions, chosen: Sequence[Backend], *backend_options: OptionGroup,
             bind: Callable[[str], Backend] | None = None) -> RunContext:
    """Check the chosen backends (bound to `family`) and the flags naming the user's files, then open the run.
    `backend_options`: option groups owned by backends (e.g. `TRTOptions`); `bind`: the family's bound backend of
    a name (whoever resolved the family passes it, so evaluators may name another backend: `run.bind`)."""
    given_parts(family, options.use_cache, "onnx", options)  # --<part>-onnx: only this run's parts, all or none
    for group in backend_options:
        given_parts(family, options.use_cache, "engine", group)
    groups = {ModelOptions: options, **{type(group): group for group in backend_options if group is not None}}
    asked = "cpu" if options.cpu else options.device  # None: the default, chosen by make_context
    for backend in chosen:  # what a backend misses here (library, GPU), before the device checks and any loading
        backend.check_device(asked, groups)
    run = make_context(family, options, *backend_options)
    run.bind = bind
    for backend in chosen:  # the device the default resolved to; the model type a fused step is for
        backend.check_device(run.device.type, groups)
        if options.fused_decode:
            backend.check_fused_decode(run.source.config.model_type)
    return run


def backend_rows(run: RunContext, chosen: Sequence[Backend]) -> list[tuple[str, Backend]]:
    """(label, backend) per result row: each chosen backend's `variants` (onnxrt: one per --quantize value)."""
    return [(variant.label, variant) for backend in chosen for variant in backend.variants(run)]


@contextmanager
def backend_steps(run: RunContext, backend: Backend, threads: bool = True) -> Iterator[tuple[Backend, object]]:
    """Set one backend (a bound backend, or a row of `backend_rows`) up, yield (backend, steps), then free it (one
    backend in memory at a time). With `threads`, torch runs with the backend's thread count (`torch_threads`)
    until then; an action that keeps several backends open at once (chat) passes False and wraps each backend's
    own calls in `torch_threads` instead, so one backend's setting never applies to another's calls."""
    steps = backend.setup(run)  # exports and validation with the run's torch threads
    if not backend.runs_torch_model:
        run.release_torch_model()  # exported graphs do not need the weights: keep memory numbers honest
    try:
        with torch_threads(run, backend) if threads else nullcontext():
            yield backend, steps
    finally:
        steps.close()


@contextmanager
def torch_threads(run: RunContext, backend: Backend) -> Iterator[None]:
    """torch's thread count while `backend` runs (its `torch_threads`: onnxrt on the CPU takes one), restored after."""
    threads, before = backend.torch_threads(run), torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def note_export_check(report, name: str, backend) -> None:
    """Say how far the backend's exported graph was from PyTorch when it was validated (ONNX-based backends)."""
    diff = backend.export_max_diff()
    if diff is not None:
        report.notes.append(f"{name}: exported ONNX max |output - PyTorch| = {diff:.3g} (validated at export; the "
                            "output is the logits, or an encoder's embeddings)")
    report.notes.extend(f"{name}: {note}" for note in backend.export_notes())


def finish(run: RunContext) -> None:
    """After the action: drop the weights, and remove artifacts if --cleanup asked for it."""
    run.release_torch_model()
    if run.options.cleanup:
        run.store.cleanup()


def generation_config(run: RunContext, sampling: SamplingOptions, max_new_tokens: int | None = None,
                      min_new_tokens: int | None = None) -> GenerationConfig:
    """The run's generation settings: the model's generation config under the user's flags, as HF `generate`
    honours it (NNDF/decoding.py). `max_new_tokens` / `min_new_tokens`: lengths the action fixes (None: the
    flags, else the model's config, else the defaults)."""
    from NNDF.decoding import refuse_unread, resolve

    config = resolve(run, sampling, max_new_tokens, min_new_tokens)
    refuse_unread(sampling, config)
    return config


def dry_breaker_ids(tokenizer, breakers) -> frozenset[int]:
    """Token ids whose text contains a sequence breaker (so a repeat never spans one): NNDF/decoding.py."""
    from NNDF.decoding import dry_breaker_ids as breaker_ids

    return breaker_ids(tokenizer, breakers)


def encode(run: RunContext, items: list):
    """Model inputs for these items (texts; images for image-to-text), as the family's task builds them
    (padding needs --use-mask): a `NNDF.tasks.Prompt`."""
    return run.family.task.prompts(run, list(items))


def generate_prompt(steps: GenerativeSteps, prompt, config: GenerationConfig,
                    observer: Observer | None = None) -> GenerationOutput:
    """The shared generation loop (NNDF/generation.py) on a prompt's decoder and encoder inputs."""
    return generate(steps, prompt.input_ids, prompt.attention_mask, config, observer, prompt.encoder)


def decode(run: RunContext, ids: list[int]) -> str:
    """The text of generated ids, special tokens left out."""
    return run.tokenizer.decode(ids, skip_special_tokens=True)
