"""The encoder task: texts in, one forward pass, a sentence embedding or class scores out.

What a run computes is its `Head`, chosen from the checkpoint (`--task` overrides): a checkpoint whose
`config.architectures` names a sequence (token) classifier is a text (token) classifier; anything else gives
sentence embeddings (`feature-extraction`), pooled and normalized as a sentence-transformers folder declares
(`modules.json`, `1_Pooling/config.json`: mean, CLS or max; a `Normalize` module), plain mean pooling for a
bare encoder. A head the checkpoint does not carry is refused (HF would add a randomly initialised one).

Inputs are right padded (learned absolute positions must not shift); texts longer than the model's limit (a
sentence-transformers `max_seq_length`, else the tokenizer's `model_max_length`, else the position table) are
truncated to it, as sentence-transformers and HF pipelines do, and the actions say how many were.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

import torch

from Encoder.heads import HEADS, Head, Pooling  # noqa: F401 (Head: this kind's API)
from NNDF.errors import ModelLoadError, UsageError
from NNDF.options import HeadOptions
from NNDF.tasks import Task

HUGE = 10 ** 6  # tokenizers without a length limit report a huge `model_max_length`


_POOLING_FLAGS = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max"}


def _model_file(location: str, name: str, local: bool) -> str | None:
    """A file of the model folder or hub repo, or None when it has none (never raises for a missing file)."""
    from transformers.utils import cached_file

    try:
        return cached_file(location, name, local_files_only=local, _raise_exceptions_for_missing_entries=False,
                           _raise_exceptions_for_connection_errors=False)
    except (OSError, ValueError):
        return None


@lru_cache(maxsize=16)
def _sentence_transformers_folder(location: str, local: bool) -> tuple[Pooling, int | None]:
    """The pooling a sentence-transformers folder declares and its `max_seq_length` (defaults for a bare encoder)."""
    modules_file = _model_file(location, "modules.json", local)
    if modules_file is None:
        return Pooling(), None
    modules = json.loads(open(modules_file, encoding="utf-8").read())
    kinds = {m.get("type", "").rsplit(".", 1)[-1]: m.get("path", "") for m in modules}
    pooling = Pooling("mean", "Normalize" in kinds, "the model's modules.json")
    if "Pooling" in kinds:
        config_file = _model_file(location, f"{kinds['Pooling']}/config.json".lstrip("/"), local)
        flags = json.loads(open(config_file, encoding="utf-8").read()) if config_file else {}
        chosen = [mode for key, mode in _POOLING_FLAGS.items() if flags.get(key)]
        others = [k for k, v in flags.items() if k.startswith("pooling_mode") and v and k not in _POOLING_FLAGS]
        if len(chosen) != 1 or others:
            raise ModelLoadError(f"{location}: pooling {', '.join(chosen + others) or 'none'} is not supported "
                                 "(one of mean, cls or max)")
        pooling = Pooling(chosen[0], pooling.normalize, "the model's modules.json and 1_Pooling/config.json")
    bert_config = _model_file(location, "sentence_bert_config.json", local)
    limit = json.loads(open(bert_config, encoding="utf-8").read()).get("max_seq_length") if bert_config else None
    return pooling, limit


@lru_cache(maxsize=16)
def _forward_inputs(config_class) -> frozenset[str]:
    """The argument names of the base model's forward for this config class (read off the class: no weights
    load; the heads' classes take the same inputs)."""
    import inspect

    from transformers import MODEL_MAPPING

    return frozenset(inspect.signature(MODEL_MAPPING[config_class].forward).parameters)


@dataclass(frozen=True)
class Encoded:
    """A batch of texts as model inputs, and how many of them were cut to the length limit."""

    inputs: dict  # name -> int64 tensor [B, T] on the run's device
    truncated: int


class TextEncoder(Task):
    """Encoder-only models: one forward pass per batch of texts."""

    kind = "encoder"
    auto_class = "AutoModel"  # the feature-extraction head's; `model_class` picks per checkpoint
    padding_side = "right"
    static_cache_refusal = "encoder models have no KV cache"
    adapters = {"frameworks": "Encoder.frameworks:EncoderTorch",
                "onnxrt": "Encoder.onnxrt:OrtEncoderOnnx",
                "trt": "Encoder.trt:EncoderTrt",
                "triton": "Encoder.triton.client:EncoderTriton"}
    does = "embed or classify it"
    evaluators = {"predict": "Encoder.evaluate.predict:Predict", "benchmark": "Encoder.evaluate.benchmark:Benchmark",
                  "accuracy": "Encoder.evaluate.accuracy:Accuracy", "run": "Encoder.evaluate.checkpoint:Checkpoint",
                  "compare": "Encoder.evaluate.checkpoint:Checkpoint", "deploy": "Encoder.triton.deploy:EncoderDeploy"}
    option_groups = (HeadOptions,)  # beside the groups every kind reads: no cache, decoding or images

    def parts(self, use_cache: bool) -> tuple[str, ...]:
        return ("encoder",)

    def items(self, options, texts: tuple, images_from: str = "--image") -> list:
        return list(texts)

    # --- what the run computes ---

    def model_class(self, source, options) -> str:
        return self.head(source, options).auto_class

    def head(self, source, options) -> Head:
        """The run's head: `--task`, else the checkpoint's classifier if it has one, else embeddings."""
        architectures = tuple(getattr(source.config, "architectures", None) or ())
        carried = [h for h in HEADS.values() if h.architecture and any(a.endswith(h.architecture) for a in architectures)]
        if options.task is None:
            return carried[0] if carried else HEADS["feature-extraction"]
        head = HEADS[options.task]
        if head.architecture and head not in carried:
            raise UsageError(f"--task {head.name}: {source.variant} has no {head.architecture[3:]} head (its "
                             f"architectures: {', '.join(architectures) or 'none declared'}); choose --task "
                             f"{' or '.join([h.name for h in carried] + ['feature-extraction'])}")
        return head

    def pooling(self, source) -> Pooling:
        return _sentence_transformers_folder(source.location, source.files_only)[0]

    def labels(self, source) -> dict[int, str]:
        """Class index -> label name (`id2label`; LABEL_i where the config names none)."""
        names = getattr(source.config, "id2label", None) or {}
        return {int(k): str(v) for k, v in names.items()}

    # --- inputs ---

    def input_names(self, run) -> tuple[str, ...]:
        """The tokenizer's inputs that the model's forward names, in graph order: a DistilBERT sharing BERT's
        tokenizer gets token_type_ids from it, which its forward would swallow; they are never made or fed."""
        names = tuple(run.tokenizer.model_input_names)
        taken = _forward_inputs(type(run.source.config))
        return tuple(n for n in ("input_ids", "attention_mask", "token_type_ids") if n in names and n in taken)

    def max_length(self, run) -> int:
        """The longest input, in tokens with the specials: sentence-transformers' `max_seq_length`, else the
        tokenizer's `model_max_length`, else the position table."""
        declared = _sentence_transformers_folder(run.source.location, run.source.files_only)[1]
        tokenizer = run.tokenizer.model_max_length
        candidates = [n for n in (declared, tokenizer if tokenizer < HUGE else None, run.source.dims.positions) if n]
        return min(candidates) if candidates else 512

    def length_problem(self, run, length: int) -> str | None:
        limit = self.max_length(run)
        if length > limit:
            return f"--input-seq-len {length} exceeds {run.source.variant}'s limit of {limit} tokens; shorten it"
        return None

    def encode(self, run, texts: list[str]) -> Encoded:
        """Right-padded inputs for these texts (empty texts refused; longer ones truncated to `max_length`)."""
        empty = [i for i, t in enumerate(texts) if not t.strip()]
        if empty:
            raise UsageError(f"text {empty[0] + 1} is empty: nothing to {'embed or classify'}")
        limit = self.max_length(run)
        lengths = [len(ids) for ids in run.tokenizer(list(texts))["input_ids"]]
        batch = run.tokenizer(list(texts), padding=True, truncation=True, max_length=limit, return_tensors="pt")
        inputs = {name: batch[name].to(run.device) for name in self.input_names(run)}
        return Encoded(inputs, sum(n > limit for n in lengths))

    def random_inputs(self, run, batch: int, length: int, generator: torch.Generator) -> dict:
        """Fresh random token ids [batch, length] (no padding), the benchmark's inputs."""
        ids = torch.randint(0, run.source.dims.vocab, (batch, length), generator=generator)
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}
        return {name: inputs[name].to(run.device) for name in self.input_names(run)}


TEXT_ENCODER = TextEncoder()
