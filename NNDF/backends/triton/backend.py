"""The `triton` client backend: a model served by Triton (`deploy MODEL onnxrt`, `serve DIR`) answers what an
in-process backend would. Kind-neutral: the kind's `TritonAdapter` says what is asked; `GenerativeTriton` here is
every generative kind's (the same prompts and generation settings as an in-process run), `Encoder.triton.client`
the encoder kind's.

`GenerativeTriton.steps` checks that the server answers and the model (`--triton-model`, default: the name deploy gives) is
ready, and returns `ServedGeneration` steps: the generation loop runs in the server, so `generate` replaces it
(NNDF/session.py `generate_prompt`). Each prompt row becomes one request, sent concurrently so Triton's
dynamic batcher can batch them: the decoder prompt without its left padding (`input_ids`), the encoder inputs
without their right padding (`encoder_<name>`), and every generation setting the run resolved (so the server,
which resolves them under the same model generation config, decodes exactly as the in-process loop does).
A streaming model (`deploy --streaming`, decoupled) is asked over a gRPC stream; its tokens arrive as they are
chosen, so a timed call (benchmark) sees the first token and each one after it, and the observer is told of
token `step` once every row has it. Refused, one line each: DRY (the served model takes no DRY settings),
timed calls on a model that does not stream (it reports no first-token or per-token time) or with beam search
(no tokens until the end). Teacher forcing (perplexity in run / compare, accuracy) is one request per forward
(`score_ids`: the served model returns the logits), so those actions score the served model too.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from NNDF.backends.base import Adapter, Backend
from NNDF.errors import UsageError
from NNDF.generation import GenerationConfig, GenerationOutput
from NNDF.steps import ServedGeneration
from NNDF.backends.triton.options import TritonOptions

OUTPUTS = ("output_ids", "text")  # a streaming model's last response is the one with `text`
TIMED = ("a served model that is not streaming returns whole generations, not the prefill and per-token times "
         "benchmark, run and compare report: time a model deployed with --streaming over grpc://, or measure "
         "served latency and throughput with tools/bench/triton_load.py")


class _Tokens:
    """Tells the observer about token `step` once every row has received it (the in-process loop does so for a
    batch): streamed responses arrive on one thread per row."""

    def __init__(self, rows: int, observer):
        self.counts, self.told, self.observer = [0] * rows, 0, observer
        self.lock = threading.Lock()

    def arrived(self, row: int) -> None:
        with self.lock:
            self.counts[row] += 1
            while self.told < min(self.counts):
                if self.told == 0:
                    self.observer.first_token()
                self.observer.token(self.told)
                self.told += 1


def _early(value) -> str:
    return value if isinstance(value, str) else ("true" if value else "false")


def request_settings(config: GenerationConfig, prompt_columns: int, ignore_generation_config: bool) -> dict:
    """The generation settings of a run as the served model's inputs ([1, 1] arrays)."""
    s = config.sampling
    values = {"max_new_tokens": (config.new_tokens(prompt_columns), np.int32),
              "num_beams": (config.num_beams, np.int32), "do_sample": (s.do_sample, np.bool_),
              "temperature": (s.temperature, np.float32), "top_k": (s.top_k, np.int32),
              "top_p": (s.top_p, np.float32), "repetition_penalty": (s.repetition_penalty, np.float32),
              "no_repeat_ngram_size": (config.no_repeat_ngram_size, np.int32),
              "length_penalty": (config.length_penalty, np.float32), "seed": (config.seed, np.int64),
              "ignore_generation_config": (ignore_generation_config, np.bool_)}
    if config.min_new_tokens:
        values["min_new_tokens"] = (config.min_new_tokens, np.int32)
    arrays = {name: np.array([[value]], dtype=dtype) for name, (value, dtype) in values.items()}
    arrays["early_stopping"] = np.array([[_early(config.early_stopping).encode()]], dtype=np.object_)
    return arrays


def request_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor, encoder: dict | None) -> list[dict]:
    """One request's tensors per prompt row: padding removed, batch axis 1."""
    rows = []
    enc_mask = (encoder or {}).get("attention_mask")
    for r in range(input_ids.shape[0]):
        keep = attention_mask[r].bool()
        arrays = {"input_ids": input_ids[r][keep].cpu().numpy().astype(np.int64)[None]}
        for name, tensor in (encoder or {}).items():
            row = tensor[r]
            if enc_mask is not None and row.shape[:1] == enc_mask.shape[1:]:
                row = row[enc_mask[r].bool()]  # right padding off (ids and mask of a text encoder)
            arrays[f"encoder_{name}"] = row.cpu().numpy()[None]
        rows.append(arrays)
    return rows


class Encoded:
    """`start`'s result: the encoder inputs a teacher-forcing request carries."""

    def __init__(self, inputs: dict):
        self.inputs = inputs


class ServedSteps(ServedGeneration):
    """Steps whose generation runs in a Triton server (one request per prompt row)."""

    def __init__(self, url: str, model: str, timeout: float, ignore_generation_config: bool, streaming: bool):
        self.url, self.model, self.timeout, self.streaming = url, model, timeout, streaming
        self.ignore_generation_config = ignore_generation_config
        self.device, self.use_cache, self.name = torch.device("cpu"), True, "triton"

    def _one(self, arrays: dict, arrived=None, outputs: tuple[str, ...] = OUTPUTS) -> dict:
        from NNDF.backends.triton.client import Client

        with Client(self.url, self.timeout) as client:
            if self.streaming:
                return client.stream(self.model, arrays, outputs, arrived)
            return client.infer(self.model, arrays, outputs)

    def _check(self, config: GenerationConfig, observer) -> None:
        if observer is not None and not self.streaming:
            raise UsageError(TIMED)
        if observer is not None and config.num_beams > 1:
            raise UsageError("beam search streams no tokens (its hypotheses change until the end): time greedy or "
                             "sampled decoding on the triton backend")
        if config.sampling.dry_multiplier > 0:
            raise UsageError("the served model takes no DRY settings: drop --dry-multiplier for the triton backend")

    def generate(self, input_ids, attention_mask, config: GenerationConfig, observer=None,
                 encoder: dict | None = None) -> GenerationOutput:
        self._check(config, observer)
        settings = request_settings(config, input_ids.shape[1], self.ignore_generation_config)
        rows = [{**row, **settings} for row in request_rows(input_ids, attention_mask, encoder)]
        tokens = _Tokens(len(rows), observer) if observer is not None else None

        def ask(r: int) -> dict:  # one row, one request (one stream)
            return self._one(rows[r], None if tokens is None else (lambda _: tokens.arrived(r)))

        with ThreadPoolExecutor(max_workers=min(len(rows), 16)) as pool:
            answers = list(pool.map(ask, range(len(rows))))
        if observer is not None:
            observer.finished()
        new = [answer["output_ids"].reshape(-1).tolist() for answer in answers]
        width = max(len(ids) for ids in new)
        tail = torch.full((len(new), width), config.pad_token_id, dtype=torch.long)
        for r, ids in enumerate(new):
            tail[r, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        sequences = torch.cat([input_ids.cpu().long(), tail], dim=1)
        return GenerationOutput(sequences, input_ids.shape[1])

    def start(self, encoder_inputs: dict, max_length: int | None = None) -> "Encoded":
        """Encoder-decoder teacher forcing: the encoder's inputs go with the forward request."""
        return Encoded(encoder_inputs)

    def forward(self, input_ids, attention_mask, position_ids, cache, last_only: bool = False):
        """Teacher forcing: one unpadded row from an empty cache (or `start`'s), computed by the served model."""
        if not (cache is None or isinstance(cache, Encoded)) or input_ids.shape[0] != 1 \
                or not bool(attention_mask.all()):
            raise UsageError("the served model runs whole generations and one-row teacher forcing from an empty "
                             "cache; this step is not one of those")
        arrays = {"score_ids": input_ids.cpu().numpy().astype(np.int64),
                  "score_positions": position_ids.cpu().numpy().astype(np.int64)}
        if isinstance(cache, Encoded):
            row = request_rows(input_ids, attention_mask, cache.inputs)[0]
            arrays.update({k: v for k, v in row.items() if k.startswith("encoder_")})
        logits = self._one(arrays, outputs=("logits",))["logits"]  # [1, T, V]
        return torch.from_numpy(np.ascontiguousarray(logits)), None

    def close(self) -> None:
        pass


class TritonAdapter(Adapter):
    """What a kind asks of a served model: which model answers by default, and the steps that send it requests."""

    def model_name(self, run) -> str:
        """The served model's name: --triton-model, else the name deploy gives this family and variant."""
        from NNDF.backends.triton.names import check_model_name

        return check_model_name(run.options_of(TritonOptions).triton_model or self.default_name(run))

    def default_name(self, run) -> str:
        from NNDF.backends.triton.names import default_model_name

        return default_model_name(run.family.name, run.source.variant, "onnxrt")

    def steps(self, run):
        """The steps of this run over the served model (checked ready first)."""
        raise NotImplementedError

    def check_serves(self, run, name: str, config) -> None:
        """One line, before any request, when the served model (its config, as deploy wrote it) is not of the
        run's family and model type."""
        from NNDF.backends.triton.names import serves

        wanted = serves(run)
        said = {key: config.parameters[key].string_value for key in wanted if key in config.parameters}
        if said == wanted:
            return
        what = " ".join(f"{key} {value}" for key, value in wanted.items())
        if len(said) < len(wanted):
            raise UsageError(f"--triton-model {name} does not say what it serves (no {', '.join(wanted)} "
                             f"parameters: not written by this project's deploy, or by an older one); this run "
                             f"needs {what}: deploy it again")
        raise UsageError(f"--triton-model {name} serves " + " ".join(f"{k} {v}" for k, v in said.items()) +
                         f", not {what}: give a model deployed from this family and model type")

    def notes(self) -> tuple[str, ...]:
        """What the action's notes say about the last served run."""
        return ()


class GenerativeTriton(TritonAdapter):
    """Every generative kind on Triton: the generation loop runs in the server (`ServedSteps`)."""

    def steps(self, run) -> ServedSteps:
        from NNDF.backends.triton.client import Client

        opts = run.options_of(TritonOptions)
        name = self.model_name(run)
        with Client(opts.triton_url, timeout=opts.triton_timeout) as client:
            client.require_ready(name)
            config = client.model_config(name)
        self.check_serves(run, name, config)
        streaming = config.model_transaction_policy.decoupled
        if streaming and client.endpoint.protocol != "grpc":
            raise UsageError(f"{name} is a streaming (decoupled) model, which answers over gRPC streams only: give "
                             f"--triton-url grpc://HOST:PORT")
        return ServedSteps(opts.triton_url, name, opts.triton_timeout, run.options.ignore_generation_config,
                           streaming)


class TritonBackend(Backend):
    """A model served by Triton; the kind's `TritonAdapter` says what is asked (see the module docstring)."""

    name = "triton"
    devices = ("cpu", "cuda")  # the client's device: the prompts are built here, the model runs in the server

    def __init__(self, task, spec=None, adapter=None, fused=None, fused_support=None):
        super().__init__(task, spec, adapter, fused, fused_support)
        self.kind: TritonAdapter = adapter(self.spec, task)

    @classmethod
    def availability(cls, options: dict | None = None) -> tuple[bool, str]:
        try:
            from NNDF.backends.triton.client import Client
        except ImportError:
            return False, "tritonclient is not installed (pip install 'tritonclient[http,grpc]==2.73.0')"
        opts = (options or {}).get(TritonOptions) or TritonOptions()
        try:
            with Client(opts.triton_url, timeout=3) as client:
                ready = client.ready_models()
        except Exception as exc:  # noqa: BLE001 - refused, unreachable, bad URL: not usable, and why
            return False, (f"no Triton server answers at {opts.triton_url} ({str(exc).splitlines()[0][:120]}): "
                           "start one with `python run.py serve DIR`, or give --triton-url")
        return True, f"Triton server at {opts.triton_url}, ready models: {', '.join(ready) or 'none'}"

    def model_name(self, run) -> str:
        return self.kind.model_name(run)

    def export_notes(self) -> tuple[str, ...]:
        return self.kind.notes()

    def setup(self, run):
        return self.kind.steps(run)
