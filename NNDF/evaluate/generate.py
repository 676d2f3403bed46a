"""`generate` for the generative kinds: batches of the user's own prompts (`--prompt`, repeatable, or `--dataset FILE.jsonl`), answered by
every chosen backend, one backend in memory at a time.

Prompts run in batches of `--batch-size`: decoder prompts left padded (`--use-mask`), encoder-decoder inputs right
padded with their mask, images of an image-to-text model with one text prefix per batch (its decoder's absolute
positions cannot be padded). Every output equals that prompt run alone (HF `generate`, greedy or beam search):
settings that depend on the prompt's length (a `max_length` from the model's generation config, a `min_length`)
are turned into that prompt's own new-token counts first, and only prompts with equal settings share a batch. A
dataset line's `max_new_tokens` is its own setting; results keep the order of the input.

Every prompt is read, checked (its length against the model's position table) and encoded before any backend is
set up, so a bad line fails at once: one line naming the file and the line number, exit 2. A decoder model whose
tokenizer has a chat template gets each prompt as one user turn in it (NNDF/chat_template.py).

The table has one row per prompt and backend, then one row per backend with its new tokens per second (summed
over the batches' generation time). JSON (`--json`): `results` holds one entry per prompt and backend with
`backend`, `prompt`, `output_ids` (the new tokens, up to EOS), `text` and `batch_rows` (how many prompts ran
together in that prompt's batch). The `triton` backend sends each prompt as its own request (a batch's prompts
at once, concurrently; the server's dynamic batcher may group them), so its `batch_rows` is 1.
"""
from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path

from NNDF import progress
from NNDF.chat_template import ChatTemplateOptions, template_of, templated
from NNDF.decoding import report_settings
from NNDF.errors import DatasetError, UsageError
from NNDF.evaluate import Evaluator
from NNDF.evaluate.chat import length_refusal
from NNDF.generate_options import GenerateOptions, check_lengths
from NNDF.generation import GenerationConfig
from NNDF.jsonl import read_jsonl, text_of
from NNDF.options import ModelOptions, SamplingOptions
from NNDF.session import decode, encode, generate_prompt, generation_config
from NNDF.steps import ServedGeneration
from NNDF.timing import sync

FIELDS = ("text", "image", "max_new_tokens")  # what a dataset line may carry


@dataclass(frozen=True)
class Request:
    """One prompt of the input."""

    number: int  # its position among the inputs, from 1
    item: object  # a text, or an image prompt
    max_new_tokens: int | None  # a dataset line's own (None: the run's)
    where: str  # names it in messages


@dataclass(frozen=True)
class Batch:
    requests: tuple[Request, ...]  # in input order
    config: GenerationConfig  # the settings every prompt of the batch has alone

    def inputs(self, run):
        """The batch's model inputs [len(requests), ...], padded (encoded when it runs: a dataset's images are
        never all in memory at once)."""
        return encode(run, [r.item for r in self.requests])


@dataclass(frozen=True)
class Generated:
    number: int
    backend: str
    prompt: str
    output_ids: tuple[int, ...]  # the new tokens, up to and including EOS
    text: str
    batch_rows: int  # prompts that ran together in this prompt's batch

    WIDE = ("prompt", "text")  # shortened to fit the terminal (NNDF/results.py); the JSON has them whole

    def row(self) -> dict:
        return {"#": self.number, "backend": self.backend, "prompt": self.prompt, "text": self.text}

    def to_json(self) -> dict:
        return {"backend": self.backend, "prompt": self.prompt, "output_ids": list(self.output_ids),
                "text": self.text, "batch_rows": self.batch_rows}


@dataclass(frozen=True)
class Throughput:
    backend: str
    prompts: int
    batches: int
    new_tokens: int
    seconds: float  # generation time summed over the batches

    @property
    def tokens_per_s(self) -> float | None:
        return self.new_tokens / self.seconds if self.seconds > 0 else None

    def row(self) -> dict:
        return {"backend": self.backend, "prompts": self.prompts, "batches": self.batches,
                "new tokens": self.new_tokens, "seconds": self.seconds, "tokens/s": self.tokens_per_s}

    def to_json(self) -> dict:
        return dataclasses.asdict(self) | {"tokens_per_s": self.tokens_per_s}


# --- the prompts ------------------------------------------------------------------------------------------------

def _requests(task, options: ModelOptions, gen: GenerateOptions) -> list[Request]:
    """The prompts in input order: --prompt texts (with --image files), or the lines of --dataset."""
    if gen.dataset is not None:
        if options.image:
            raise UsageError("--image and --dataset are alternatives: give each line's image as its \"image\" field")
        return _dataset_requests(task, options, gen.dataset)
    if not (gen.prompt or options.image):
        raise UsageError("generate needs prompts: give --prompt TEXT (repeatable) or --dataset FILE.jsonl "
                         "(image-to-text models: --image PATH)")
    if any(not p.strip() for p in gen.prompt):
        raise UsageError("empty --prompt: nothing to generate from")
    items = task.items(options, gen.prompt)
    return [Request(n, item, None, f"prompt {n}") for n, item in enumerate(items, 1)]


def _dataset_requests(task, options: ModelOptions, dataset: str) -> list[Request]:
    """One request per line; an image path is relative to the file's folder."""
    folder = Path(dataset).resolve().parent
    requests = []
    for number, row in read_jsonl(dataset):
        where = f"--dataset {dataset}: line {number}"
        unknown = sorted(set(row) - set(FIELDS))
        if unknown:
            raise DatasetError(f"{where} has an unknown field \"{unknown[0]}\" (a line's fields: {', '.join(FIELDS)})")
        new = row.get("max_new_tokens")
        if new is not None and (isinstance(new, bool) or not isinstance(new, int) or new < 1):
            raise DatasetError(f"{where} has \"max_new_tokens\": {json.dumps(new)[:40]}; give a positive integer")
        image, text = row.get("image"), row.get("text", "")
        if image is None:
            text = text_of(dataset, number, row)
        elif not isinstance(image, str) or not image.strip() or not isinstance(text, str):
            raise DatasetError(f"{where}: \"image\" is a path and \"text\" a string")
        images, texts = () if image is None else (str(folder / image),), (text,) if text.strip() else ()
        try:
            item = task.items(dataclasses.replace(options, image=images), texts, "image")[0]
        except UsageError as exc:  # a text model given an image, an image model given none, a missing file
            raise DatasetError(f"{where}: {exc}") from exc
        requests.append(Request(len(requests) + 1, item, new, where))
    return requests


def _batch_key(item) -> str | None:
    """What prompts of one batch must share besides their settings: an image prompt's text (the image-to-text
    decoder's absolute positions cannot be padded); texts share nothing."""
    return None if isinstance(item, str) else getattr(item, "text", None)


def _alone(run, request: Request, config: GenerationConfig) -> GenerationConfig:
    """The settings of this prompt run alone, refused (one line) when it does not fit the model: lengths that
    depend on the prompt (max_length, min_length) become its own new-token counts."""
    inputs = encode(run, [request.item])
    own = inputs.input_ids.shape[1]  # the decoder's prompt alone
    try:
        refusal, new = length_refusal(run, inputs, config), config.new_tokens(own)
    except UsageError as exc:  # the model's max_length leaves no room after this prompt
        refusal = str(exc)
    if refusal:
        raise UsageError(f"{request.where}: {refusal}")
    return dataclasses.replace(config, max_new_tokens=new, max_length=None, min_length=0,
                               min_new_tokens=max(config.min_new_tokens, config.min_length - own))


def plan(run, requests: list[Request], sampling: SamplingOptions, max_new_tokens: int | None) -> list[Batch]:
    """Batches of up to --batch-size prompts with equal settings, each checked by encoding it (padded)."""
    configs: dict[int | None, GenerationConfig] = {}
    groups: list[tuple[GenerationConfig, list[Request]]] = []  # in the order of their first prompt
    filling: dict[tuple, list[Request]] = {}  # (settings, batch key) -> the group that takes the next such prompt
    for request in requests:
        wanted = request.max_new_tokens or max_new_tokens
        if wanted not in configs:
            configs[wanted] = generation_config(run, sampling, wanted)
        config = _alone(run, request, configs[wanted])
        key = (config, _batch_key(request.item))
        if len(filling.get(key, ())) in (0, run.options.batch_size):
            filling[key] = []
            groups.append((config, filling[key]))
        filling[key].append(request)
    batches = []
    for config, group in groups:
        batch = Batch(tuple(group), config)
        try:
            batch.inputs(run)
        except UsageError as exc:
            n = len(group) - 1
            others = f" and the {'prompt' if n == 1 else f'{n} prompts'} batched with it" if n else ""
            raise UsageError(f"{group[0].where}{others}: {exc}") from exc
        batches.append(batch)
    return batches


# --- running them -----------------------------------------------------------------------------------------------

def _run_batches(run, name: str, steps, batches: list[Batch], total: int) -> tuple[list[Generated], Throughput]:
    served = isinstance(steps, ServedGeneration)  # one request per prompt: each prompt runs alone
    results, seconds, new_tokens = [], 0.0, 0
    with progress.bar(desc=f"{name} generate", total=total, unit="prompt") as bar:
        for batch in batches:
            inputs = batch.inputs(run)
            sync(run.device)
            start = time.perf_counter()
            out = generate_prompt(steps, inputs, batch.config)
            sync(run.device)
            seconds += time.perf_counter() - start
            for row, request in enumerate(batch.requests):
                ids = out.new_tokens(row, batch.config.eos_token_id)
                new_tokens += len(ids)
                results.append(Generated(request.number, name, str(request.item), tuple(ids), decode(run, ids),
                                         1 if served else len(batch.requests)))
            bar.update(len(batch.requests))
    results.sort(key=lambda r: r.number)
    return results, Throughput(name, total, len(batches), new_tokens, seconds)


def _agreement(per_backend: list[list[Generated]]) -> list[str]:
    """Each later backend's outputs against the first's."""
    first = per_backend[0]
    return [f"{rows[0].backend}: output equals {first[0].backend}'s on "
            f"{sum(a.output_ids == b.output_ids for a, b in zip(first, rows))} of {len(rows)} prompts"
            for rows in per_backend[1:]]


class Generate(Evaluator):
    """`generate` for the generative kinds: the prompts in planned batches, one row per prompt and backend."""

    def __init__(self, action: str, options: ModelOptions, sampling: SamplingOptions, gen: GenerateOptions,
                 template: ChatTemplateOptions = ChatTemplateOptions()) -> None:
        super().__init__(action, options, sampling, gen, template)
        self.sampling, self.gen, self.template_options = sampling, gen, template

    def check(self, task) -> None:
        least = self.sampling.min_new_tokens
        check_lengths(least, self.gen.max_new_tokens)
        self.requests = _requests(task, self.options, self.gen)  # bad input fails before anything loads
        for request in self.requests:
            if least is not None and request.max_new_tokens is not None and request.max_new_tokens < least:
                raise DatasetError(f"{request.where} has \"max_new_tokens\": {request.max_new_tokens}, below "
                                   f"--min-new-tokens {least}")

    def begin(self, run, report) -> None:
        options, gen = self.options, self.gen
        texts = templated(template_of(run, self.template_options), [r.item for r in self.requests])  # chat template
        self.requests = [dataclasses.replace(r, item=text) for r, text in zip(self.requests, texts)]
        self.batches = plan(run, self.requests, self.sampling, gen.max_new_tokens)
        self.config = config = generation_config(run, self.sampling, gen.max_new_tokens)
        report.settings = {
            "device": run.device.type, "precision": options.precision, "prompts": len(self.requests),
            "batch_size": options.batch_size, "max_new_tokens": gen.max_new_tokens or config.max_new_tokens
            or f"max_length {config.max_length}", **report_settings(options, config)}

    def evaluate(self, run, name: str, backend, steps, report):
        results, speed = _run_batches(run, name, steps, self.batches, len(self.requests))
        report.extra.append(speed)
        self.served = isinstance(steps, ServedGeneration)  # read by `export_notes`, right after
        return results

    def export_notes(self, report, name: str, backend) -> None:
        super().export_notes(report, name, backend)
        if self.served:
            report.notes.append(f"{name}: each prompt is its own request (a batch's prompts are sent at once; "
                                "the server's dynamic batcher may group them): batch_rows 1")

    def end(self, run, report, outcomes: list) -> None:
        per_backend = [results for _, results in outcomes]
        report.results = [r for rows in zip(*per_backend) for r in rows]  # per prompt, the backends side by side
        report.notes.extend(_agreement(per_backend))
        if self.config.sampling.do_sample:
            report.notes.append("sampling: each batch draws from one generator seeded with --seed, so a prompt's "
                                "sample depends on its batch (greedy and beam search do not)")
