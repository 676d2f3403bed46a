"""The python-backend model of generative kinds: the project's generation loop over its ONNX Runtime steps,
inside Triton (`model.py` stubs written by `deploy` serve `GenerativeModel`).

Loading: `serving.json` (written by deploy, NNDF/triton/generative_deploy.py) is checked, then the run is opened
as `--torch-dir hf/ --<part>-onnx onnx/<part>/...` would open it, so the graphs are checked against the model
(names, vocabulary, layers, heads, dtype) before they serve, and the tokenizer, prompts and generation settings
are exactly the in-process ones. Graphs built from the weights (a static-cache deployment's, where its
in-process row runs them; validated against PyTorch when they were built) run on their own steps
(`OnnxRuntimeBackend.served_steps`), the run then naming no graph files.

Requests: each is one prompt (batch dimension 1): `text` (and `image`), or `input_ids` (and `encoder_<name>`:
what the `triton` client backend sends, so served tokens can be compared with in-process ones on any prompt).
A request that cannot run (missing or both prompt inputs, empty or non-UTF-8 text, a setting out of range, more
new tokens, beams or KV cache than the limits deploy recorded in serving.json) gets an error response at once:
INVALID_ARG (HTTP 400) for the client's mistakes, INTERNAL (500) for the model's own failures; the others in the
same `execute` still run. Requests whose generation settings are equal run as one padded batch (left-padded
decoder prompts, right-padded encoder inputs: padded batches are exact, tests/test_parity.py), cut where the
batch's KV cache would pass the limit; encoder-decoder requests also need the same decoder prompt length, and
sampled requests run alone (a seed draws the same tokens only for the same batch). Streaming (decoupled mode):
greedy / sampled tokens go to each request's sender as they are chosen, then the whole answer with the final
flag; a cancelled request gets no more tokens, and a batch whose clients all cancelled stops generating.
"""
from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from NNDF.errors import HarnessError, UsageError
from NNDF.generation import Observer
from NNDF.sampling import eos_ids
from NNDF.tasks import Prompt

SERVING = "serving.json"
_RECORD_KEYS = {"family": str, "variant": str, "model_type": str, "backend": str, "device": str, "options": dict,
                "parts": dict, "encoder_inputs": list, "images": bool, "max_new_tokens_limit": int,
                "num_beams_limit": int, "cache_limit_mib": int, "streaming": bool}
_EARLY = ("true", "false", "never")


class RequestError(HarnessError):
    """A request that cannot run: answered with this one-line error, the model keeps serving."""


CLIENT_MISTAKES = (RequestError, UsageError)  # answered INVALID_ARG (HTTP 400); anything else is INTERNAL (500)


def load_record(version: Path) -> dict:
    """serving.json, checked: every key with its type, the files it names present."""
    path = version / SERVING
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise HarnessError(f"{path}: cannot read the serving record ({exc})") from exc
    for key, kind in _RECORD_KEYS.items():
        if not isinstance(record.get(key), kind):
            raise HarnessError(f"{path}: {key!r} is missing or not a {kind.__name__}")
    missing = [rel for rel in record["parts"].values() if not (version / rel).is_file()]
    if missing or not (version / "hf" / "config.json").is_file():
        raise HarnessError(f"{path}: missing files {', '.join(missing) or 'hf/config.json'}; deploy again")
    return record


def open_served_run(version: Path, record: dict, working_dir: Path):
    """The run as `--torch-dir hf --<part>-onnx ...` opens it (graphs checked against the model when set up)."""
    from NNDF import registry
    from NNDF.context import make_context
    from NNDF.options import ModelOptions

    built = record.get("graphs") == "built"  # run by their own steps (`served_steps`), not as user files
    files = {} if built else {f"{part}_onnx": str(version / rel) for part, rel in record["parts"].items()}
    options = ModelOptions(**record["options"], **files, torch_dir=str(version / "hf"), working_dir=str(working_dir),
                           device=record["device"])
    return make_context(registry.family(record["family"]), options)


def _scalar(array: np.ndarray | None, name: str):
    if array is None:
        return None
    flat = array.reshape(-1)
    if flat.size != 1:
        raise RequestError(f"{name}: give one value per request, got {flat.size}")
    value = flat[0]
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RequestError(f"{name} is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    return value.item()


@dataclass(frozen=True)
class Job:
    index: int  # position of the request in execute()'s list
    prompt: Prompt  # one row
    config: object  # NNDF.generation.GenerationConfig (None: a teacher-forcing request)
    alone: bool  # sampled or scored: run by itself
    positions: torch.Tensor | None = None  # teacher forcing: the decoder's position ids [1, T]
    length: int = 0  # prompt + new tokens: the positions its cache holds per beam


class GenerativeModel:
    """Triton's `TritonPythonModel` for generative kinds (see the module docstring)."""

    def initialize(self, args: dict) -> None:
        import triton_python_backend_utils as pb_utils

        from NNDF import registry

        self.pb = pb_utils
        version = Path(args["model_repository"]) / args["model_version"]
        self.record = load_record(version)
        self.limit = self.record["max_new_tokens_limit"]
        self.cache_limit = self.record["cache_limit_mib"] * 2 ** 20  # bytes
        self.working_dir = Path(tempfile.mkdtemp(prefix="nndf-served-"))
        self.run = open_served_run(version, self.record, self.working_dir)
        config = json.loads(args["model_config"])
        self.streaming = bool(config.get("model_transaction_policy", {}).get("decoupled"))
        said = {key: value.get("string_value") for key, value in config.get("parameters", {}).items()}
        if any(said.get(key) != self.record[key] for key in ("family", "model_type")):
            raise HarnessError(f"{version / SERVING}: the model's config says it serves {said.get('family')} "
                               f"{said.get('model_type')}, serving.json {self.record['family']} "
                               f"{self.record['model_type']}; deploy again")
        if self.streaming != self.record["streaming"]:
            raise HarnessError(f"{version / SERVING}: streaming is {self.record['streaming']} but the config's "
                               f"decoupled mode is {self.streaming}; deploy again")
        paths = {part: version / rel for part, rel in self.record["parts"].items()}
        self.steps = registry.backend(self.run.family, self.record["backend"]).served_steps(
            self.run, paths, self.record.get("graphs") == "built")
        self.task = self.run.family.task
        self.run.tokenizer  # loaded now: a model that cannot tokenize fails to load (serve names why), not each request

    def finalize(self) -> None:
        self.steps.close()
        shutil.rmtree(self.working_dir, ignore_errors=True)

    def execute(self, requests: list) -> list | None:
        """One response per request; in streaming (decoupled) mode sent through each request's sender after its
        tokens, with the final flag (execute then returns None)."""
        senders = [r.get_response_sender() for r in requests] if self.streaming else None
        responses: list = [None] * len(requests)
        jobs = []
        for index, request in enumerate(requests):
            try:
                jobs.append(self.job(index, request))
            except CLIENT_MISTAKES as exc:
                responses[index] = self.error(str(exc), client=True)
            except Exception as exc:  # noqa: BLE001 - a bad request never takes the model down
                responses[index] = self.error(f"{exc.__class__.__name__}: {exc}")
        for group in self.groups(jobs):
            stream = None if senders is None or group[0].config is None else _Stream(
                self.pb, [requests[j.index] for j in group], [senders[j.index] for j in group],
                group[0].config.eos_token_id)
            try:
                answers = self.generate(group, stream)
            except Exception as exc:  # noqa: BLE001 - the group fails, the model keeps serving
                answers = [self.error(f"generation failed ({exc.__class__.__name__}: {exc})")] * len(group)
            for job, answer in zip(group, answers):
                responses[job.index] = answer
        if senders is None:
            return responses
        for sender, response in zip(senders, responses):
            sender.send(response, flags=self.pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None

    def error(self, message: str, client: bool = False):
        """An error response: INVALID_ARG (HTTP 400) for the client's mistake, INTERNAL (500) otherwise."""
        code = self.pb.TritonError.INVALID_ARG if client else self.pb.TritonError.INTERNAL
        return self.pb.InferenceResponse(output_tensors=[], error=self.pb.TritonError(message, code))

    def array(self, request, name: str) -> np.ndarray | None:
        """A request's tensor (batch 1, the batch axis dropped), or None when it was not sent."""
        tensor = self.pb.get_input_tensor_by_name(request, name)
        if tensor is None:
            return None
        array = tensor.as_numpy()
        if array.shape[:1] != (1,):
            raise RequestError(f"{name}: send one prompt per request (batch dimension 1), got shape "
                               f"{list(array.shape)}")
        return array[0]

    def settings(self, request) -> dict:
        from NNDF.triton.config import SETTINGS

        values = {name: _scalar(self.array(request, name), name) for name in SETTINGS}
        if values["early_stopping"] is not None and values["early_stopping"] not in _EARLY:
            raise RequestError(f"early_stopping {values['early_stopping']!r}: give one of {', '.join(_EARLY)}")
        for name in ("max_new_tokens", "num_beams"):
            if values[name] is not None and values[name] < 1:
                raise RequestError(f"{name} must be >= 1, got {values[name]}")
        if values["max_new_tokens"] is not None and values["max_new_tokens"] > self.limit:
            raise RequestError(f"max_new_tokens {values['max_new_tokens']} is over this model's limit of "
                               f"{self.limit} (deploy --max-new-tokens-limit)")
        self.check_beams(values["num_beams"] or 1, "num_beams")
        return values

    def check_beams(self, beams: int, source: str) -> None:
        limit = self.record["num_beams_limit"]
        if beams > limit:
            raise RequestError(f"{source} {beams} is over this model's limit of {limit} beams (deploy "
                               "--num-beams-limit)")

    def cache_bytes(self, rows: int, beams: int, length: int) -> int:
        """The KV cache of `rows` x `beams` sequences of `length` positions, in this model's dtype."""
        from NNDF.generation import cache_bytes

        return cache_bytes(self.run.source.dims, rows, beams, length, 2 if self.run.options.fp16 else 4)

    def config(self, values: dict):
        """The generation settings of a request: the model's generation config under the request's values, as
        `chat` resolves them under the same flags (NNDF/decoding.py)."""
        from NNDF.decoding import resolve
        from NNDF.options import SamplingOptions

        options = replace(self.run.options, num_beams=values["num_beams"],
                          ignore_generation_config=bool(values["ignore_generation_config"]))
        sampling = SamplingOptions(**{k: values[k] for k in ("do_sample", "temperature", "top_k", "top_p",
                                                             "repetition_penalty", "no_repeat_ngram_size",
                                                             "length_penalty", "early_stopping")},
                                   seed=int(values["seed"] or 0))
        return resolve(replace(self.run, options=options), sampling, values["max_new_tokens"],
                       values["min_new_tokens"])

    def score_job(self, index: int, request, ids: np.ndarray) -> Job:
        """Teacher forcing: the logits of one forward pass over `score_ids` (at `score_positions`)."""
        positions = self.array(request, "score_positions")
        if positions is None or positions.shape != ids.shape:
            raise RequestError("score_ids need score_positions of the same length")
        limit = self.run.source.dims.positions
        if limit and ids.size > limit:
            raise RequestError(f"score_ids: {ids.size} tokens do not fit the model's {limit} positions")
        prompt = self.id_prompt(request, ids)
        return Job(index, prompt, None, True, torch.from_numpy(positions.astype(np.int64))[None])

    def job(self, index: int, request) -> Job:
        scored = self.array(request, "score_ids")
        if scored is not None:
            if self.array(request, "text") is not None or self.array(request, "input_ids") is not None:
                raise RequestError("score_ids is a teacher-forcing request: send it without text or input_ids")
            return self.score_job(index, request, scored)
        values = self.settings(request)
        config = self.config(values)
        prompt = self.prompt(request)
        columns = prompt.input_ids.shape[1]
        new = config.new_tokens(columns)
        if new > self.limit:
            raise RequestError(f"{new} new tokens (the model's generation config) is over this model's limit of "
                               f"{self.limit}: give max_new_tokens")
        length = self.task.prompt_length(prompt)
        if self.task.length_problem(self.run, length, new):
            raise RequestError(f"a prompt of {length} tokens and {new} new tokens do not fit the model's "
                               f"{self.run.source.dims.positions} positions: shorten the prompt or give a "
                               "smaller max_new_tokens")
        self.check_beams(config.num_beams, "num_beams (the model's generation config)")
        cache = self.cache_bytes(1, config.num_beams, length + new)
        if cache > self.cache_limit:
            raise RequestError(f"{config.num_beams} beam(s) x ({length} prompt + {new} new tokens) need a "
                               f"{cache / 2 ** 20:.1f} MiB KV cache, over this model's limit of "
                               f"{self.record['cache_limit_mib']} MiB (deploy --cache-limit-mib): give fewer "
                               "num_beams or max_new_tokens")
        return Job(index, prompt, config, config.sampling.do_sample, length=length + new)

    def prompt(self, request) -> Prompt:
        text, ids = self.array(request, "text"), self.array(request, "input_ids")
        if (text is None) == (ids is None):
            raise RequestError("give exactly one of the inputs text (BYTES) and input_ids (INT64)")
        if ids is not None:
            return self.id_prompt(request, ids)
        line = _scalar(text, "text")
        image = self.array(request, "image") if self.record["images"] else None
        if not isinstance(line, str) or (not line.strip() and image is None):  # an image alone may be captioned
            raise RequestError("text is empty: give a prompt")
        if image is None:
            return self.task.prompts(self.run, self.task.items(self.run.options, (line,)))
        with tempfile.TemporaryDirectory(dir=self.working_dir) as folder:  # the task reads images from files
            path = Path(folder) / "image"
            path.write_bytes(image.reshape(-1)[0])
            items = self.task.items(replace(self.run.options, image=(str(path),)), (line,))
            return self.task.prompts(self.run, items)

    def id_prompt(self, request, ids: np.ndarray) -> Prompt:
        vocab = self.run.source.dims.vocab
        if ids.ndim != 1 or ids.size == 0 or ids.min() < 0 or ids.max() >= vocab:
            raise RequestError(f"input_ids: give one non-empty row of token ids in [0, {vocab})")
        row = torch.from_numpy(ids.astype(np.int64))[None]
        encoder = None
        if self.record["encoder_inputs"]:
            encoder = {}
            for name in self.record["encoder_inputs"]:
                array = self.array(request, f"encoder_{name}")
                if array is None:
                    raise RequestError(f"encoder_{name} is missing (this model's encoder reads "
                                       f"{', '.join(self.record['encoder_inputs'])})")
                encoder[name] = torch.from_numpy(np.ascontiguousarray(array))[None]
        return Prompt(row, torch.ones_like(row), encoder)

    def groups(self, jobs: list[Job]) -> list[list[Job]]:
        """Jobs that can run as one padded batch: equal settings (and, with an encoder, equal decoder prompt
        lengths), as many as keep the batch's KV cache (rows x beams x the longest length) under the limit;
        sampled jobs alone."""
        table: dict = {}
        for job in jobs:
            key = ("alone", job.index) if job.alone else (  # sampled and scored jobs run alone
                job.config, job.prompt.input_ids.shape[1] if job.prompt.encoder is not None else None)
            table.setdefault(key, []).append(job)
        return [batch for group in table.values() for batch in self.within_cache_limit(group)]

    def within_cache_limit(self, group: list[Job]) -> list[list[Job]]:
        """`group` cut into consecutive batches whose padded KV cache fits the limit (each job fits alone)."""
        batches: list[list[Job]] = []
        for job in group:
            batch = batches[-1] if batches else None
            if batch is not None and job.config is not None and self.cache_bytes(
                    len(batch) + 1, job.config.num_beams, max(j.length for j in (*batch, job))) <= self.cache_limit:
                batch.append(job)
            else:
                batches.append([job])
        return batches

    def score(self, job: Job):
        """One forward pass from an empty cache (the encoder first, for encoder-decoder kinds): logits [1, T, V]."""
        ids = job.prompt.input_ids
        with torch.inference_mode():
            encoder = job.prompt.encoder
            cache = self.steps.start(encoder, ids.shape[1]) if encoder is not None else self.steps.new_cache(1, ids.shape[1])
            logits, _ = self.steps.forward(ids, torch.ones_like(ids), job.positions, cache)
        tensor = self.pb.Tensor("logits", np.ascontiguousarray(logits.float().cpu().numpy()))
        return self.pb.InferenceResponse(output_tensors=[tensor])

    def generate(self, group: list[Job], observer=None) -> list:
        from NNDF.generation import generate

        if group[0].config is None:  # teacher forcing runs alone
            return [self.score(group[0])]
        pad = self.run.tokenizer.pad_token_id or 0
        prompt = merge([job.prompt for job in group], pad)
        config = group[0].config
        with torch.inference_mode():
            out = generate(self.steps, prompt.input_ids, prompt.attention_mask, config, observer, prompt.encoder)
        answers = []
        for row in range(len(group)):
            ids = out.new_tokens(row, config.eos_token_id)
            text = self.run.tokenizer.decode(ids, skip_special_tokens=True)
            answers.append(self.pb.InferenceResponse(output_tensors=[
                self.pb.Tensor("text", np.array([[text.encode("utf-8")]], dtype=np.object_)),
                self.pb.Tensor("output_ids", np.array([ids], dtype=np.int64))]))
        return answers


class _Stream(Observer):
    """Streaming: each row's chosen token goes to its request's sender as it is chosen (until the row's EOS or
    the client cancels); when every client of the batch has gone, the generation stops."""

    def __init__(self, pb, requests: list, senders: list, eos: int | tuple[int, ...] | None):
        self.pb, self.requests, self.senders, self.eos = pb, requests, senders, eos_ids(eos)
        self.open = [True] * len(senders)
        self.live = [True] * len(senders)  # the client still listens

    def chosen(self, step: int, tokens: torch.Tensor) -> None:
        for row, token in enumerate(tokens.tolist()):
            if self.live[row] and self.requests[row].is_cancelled():
                self.open[row] = self.live[row] = False
            if self.open[row]:
                tensor = self.pb.Tensor("output_ids", np.array([[token]], dtype=np.int64))
                self.senders[row].send(self.pb.InferenceResponse(output_tensors=[tensor]))
                self.open[row] = token not in self.eos  # nothing after a row's EOS (any of them)
        if not any(self.live):
            raise RequestError("every client of this batch cancelled its request")


def _pad(rows: list[torch.Tensor], value: int, left: bool) -> torch.Tensor:
    """Rows [1, T_i] padded to [N, max T] on the left or the right."""
    width = max(r.shape[1] for r in rows)
    padded = []
    for r in rows:
        fill = r.new_full((1, width - r.shape[1]), value)
        padded.append(torch.cat([fill, r] if left else [r, fill], dim=1))
    return torch.cat(padded)


def merge(prompts: list[Prompt], pad: int) -> Prompt:
    """One batch from one-row prompts: decoder prompts left padded (their masks with 0), encoder inputs of
    different lengths right padded (`attention_mask` with 0, ids with the pad id), others stacked."""
    if len(prompts) == 1:
        return prompts[0]
    ids = _pad([p.input_ids for p in prompts], pad, left=True)
    mask = _pad([p.attention_mask for p in prompts], 0, left=True)
    encoder = None
    if prompts[0].encoder is not None:
        encoder = {}
        for name in prompts[0].encoder:
            rows = [p.encoder[name] for p in prompts]
            same = len({tuple(r.shape) for r in rows}) == 1
            encoder[name] = torch.cat(rows) if same else _pad(rows, 0 if name == "attention_mask" else pad, left=False)
    return Prompt(ids, mask, encoder)
