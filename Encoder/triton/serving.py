"""What runs inside Triton's python backend for an encoder deployment: the tokenizer model and the python
flavour of the encoder model. Triton's stub (`model.py`, written by `NNDF.triton.repository`) imports these
classes; the computation is plain functions over numpy arrays, so tests run it without a server.

- `TokenizeModel` (`<name>_tokenize`): `text` BYTES [B, 1] (UTF-8) -> `input_ids`, `attention_mask` (and
  `token_type_ids` where the model takes them) INT64 [B, T]. The tokenizer folder is the run's, saved into the
  model's version folder (`1/tokenizer/`); texts are right padded within a request and truncated to the model's
  limit (config parameter `max_length`, `TextEncoder.max_length`), as `TextEncoder.encode` does in process.
- `OnnxEncoderModel` (`<name>_model_python`): the token ids -> the head's output (`embeddings` [B, H] or
  `logits` [B, C] / [B, T, C]), running the same ONNX file and the same steps as the in-process `onnxrt`
  backend (`Encoder.ort_steps.OrtEncoderSteps`). With dynamic batching Triton hands one `execute` several
  requests of different lengths (its inputs allow ragged batches): they are right padded to the longest
  (pad id, mask 0), run as ONE batch, and split back; per-token logits are cut back to each request's length.
  Padding never changes a row's numbers (the export is validated padded against alone).

A bad request (empty text, text that is not UTF-8, ids outside the vocabulary, inputs of different shapes) gets
an error response naming what was wrong; the other requests of the batch are answered, and the model keeps
serving.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np


class RequestError(ValueError):
    """A request the model cannot answer: its message goes back to the client as the response's error."""


def parameters(config: dict) -> dict[str, str]:
    """A model config's `parameters` (key -> string_value), from the JSON Triton hands `initialize`."""
    return {key: value.get("string_value", "") for key, value in config.get("parameters", {}).items()}


# --- tokenizer ------------------------------------------------------------------------------------------------

def decode_texts(values: np.ndarray) -> list[str]:
    """UTF-8 texts of a BYTES tensor [B, 1] (or [B]); an empty or undecodable text is refused."""
    texts = []
    for number, value in enumerate(values.reshape(-1), 1):
        raw = value if isinstance(value, bytes) else str(value).encode()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RequestError(f"text {number} is not UTF-8 ({exc.reason} at byte {exc.start})") from None
        if not text.strip():
            raise RequestError(f"text {number} is empty: nothing to embed or classify")
        texts.append(text)
    if not texts:
        raise RequestError("the request has no text (shape [0, 1]): send at least one")
    return texts


class Tokenizer:
    """The run's tokenizer as `TextEncoder.encode` uses it: right padding, truncation to `max_length`."""

    def __init__(self, folder: Path, max_length: int, input_names: tuple[str, ...]):
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(folder), padding_side="right")
        self.max_length, self.input_names = max_length, input_names

    def __call__(self, texts: list[str]) -> dict[str, np.ndarray]:
        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length,
                               return_tensors="np")
        return {name: batch[name].astype(np.int64) for name in self.input_names}  # [B, T] each


# --- the encoder ----------------------------------------------------------------------------------------------

def pad_requests(requests: list[dict[str, np.ndarray]], pad_id: int) -> dict[str, np.ndarray]:
    """Several requests' inputs [b_i, T_i] as one right-padded batch [sum b_i, max T_i] (pad id; mask and token
    types 0: padded positions are masked out)."""
    length = max(r["input_ids"].shape[1] for r in requests)
    batch = {}
    for name in requests[0]:
        fill = pad_id if name == "input_ids" else 0
        batch[name] = np.concatenate([np.pad(r[name], ((0, 0), (0, length - r[name].shape[1])),
                                             constant_values=fill) for r in requests])
    return batch


def check_ids(inputs: dict[str, np.ndarray], vocab: int) -> None:
    """One request's token inputs: the same shape [b, T] (T >= 1) for every input, ids inside the vocabulary,
    a mask of 0 and 1 with its first column 1 (right padding: a row that masks everything has nothing to pool)."""
    shapes = {name: tuple(a.shape) for name, a in inputs.items()}
    if len(set(shapes.values())) != 1:
        raise RequestError("inputs differ in shape: " + ", ".join(f"{n} {list(s)}" for n, s in shapes.items()))
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    if ids.ndim != 2 or ids.shape[1] == 0:
        raise RequestError(f"input_ids has shape {list(ids.shape)}: send [batch, tokens] with at least one token")
    if ids.size and (ids.min() < 0 or ids.max() >= vocab):
        raise RequestError(f"input_ids must lie in [0, {vocab}) (the vocabulary); got {ids.min()}..{ids.max()}")
    if not np.isin(mask, (0, 1)).all() or (mask[:, 0] != 1).any():
        raise RequestError("attention_mask must be 0 or 1, right padded (every row keeps its first token)")


class EncoderRunner:
    """The ONNX file on the in-process onnxrt steps; several requests padded into one forward."""

    def __init__(self, path: Path, output: str, pad_id: int, vocab: int, device: str = "cpu", threads: int = 0):
        from Encoder.ort_steps import OrtEncoderSteps

        self.steps = OrtEncoderSteps(path, device, output, threads)
        self.names = tuple(self.steps.graph.inputs)
        self.per_token = len(self.steps.graph.outputs[output].shape) == 3
        self.pad_id, self.vocab = pad_id, vocab

    def __call__(self, requests: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
        """Each request's output (float rows [b_i, ...]); requests are checked by the caller."""
        import torch

        batch = pad_requests([{n: r[n] for n in self.names} for r in requests], self.pad_id)
        out = self.steps.forward({n: torch.from_numpy(a).to(self.steps.device) for n, a in batch.items()})
        out = out.cpu().numpy()
        results, start = [], 0
        for request in requests:
            rows, length = request["input_ids"].shape
            part = out[start:start + rows]
            results.append(np.ascontiguousarray(part[:, :length] if self.per_token else part))
            start += rows
        return results

    def close(self) -> None:
        self.steps.close()


# --- Triton's side: requests in, responses out ----------------------------------------------------------------

def _error(pb_utils, exc: Exception):
    """An error response: INVALID_ARG (HTTP 400) for a bad request, INTERNAL (500) for a failure of the model."""
    code = pb_utils.TritonError.INVALID_ARG if isinstance(exc, RequestError) else pb_utils.TritonError.INTERNAL
    return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(str(exc), code))


class TokenizeModel:
    """Triton python-backend model: text -> token ids (one tokenizer call per request)."""

    def initialize(self, args: dict) -> None:
        config = json.loads(args["model_config"])
        params = parameters(config)
        folder = Path(args["model_repository"]) / args["model_version"] / "tokenizer"
        self.tokenizer = Tokenizer(folder, int(params["max_length"]), tuple(params["input_names"].split(",")))

    def execute(self, requests: list) -> list:
        import triton_python_backend_utils as pb_utils

        responses = []
        for request in requests:
            try:
                texts = decode_texts(pb_utils.get_input_tensor_by_name(request, "text").as_numpy())
                outputs = self.tokenizer(texts)
            except RequestError as exc:
                responses.append(_error(pb_utils, exc))
                continue
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor(name, array) for name, array in outputs.items()]))
        return responses


class OnnxEncoderModel:
    """Triton python-backend model: token ids -> the head's output; a batch of requests runs as one forward."""

    def initialize(self, args: dict) -> None:
        config = json.loads(args["model_config"])
        params = parameters(config)
        device = "cuda:" + args["model_instance_device_id"] if args["model_instance_kind"] == "GPU" else "cpu"
        path = Path(args["model_repository"]) / args["model_version"] / params["onnx_file"]
        self.output = config["output"][0]["name"]
        self.runner = EncoderRunner(path, self.output, int(params["pad_token_id"]), int(params["vocab_size"]),
                                    device, int(params["threads"]))

    def execute(self, requests: list) -> list:
        import triton_python_backend_utils as pb_utils

        good, responses = [], [None] * len(requests)
        for index, request in enumerate(requests):
            try:
                inputs = {n: pb_utils.get_input_tensor_by_name(request, n).as_numpy() for n in self.runner.names}
                check_ids(inputs, self.runner.vocab)
                good.append((index, inputs))
            except RequestError as exc:
                responses[index] = _error(pb_utils, exc)
        if not good:
            return responses
        try:
            arrays = self.runner([inputs for _, inputs in good])
        except Exception as exc:  # onnxruntime's own errors: answered, never fatal to the model
            arrays = [RuntimeError(f"the encoder failed on this batch: {str(exc).strip()[:300]}")] * len(good)
        for (index, _), array in zip(good, arrays):
            responses[index] = (_error(pb_utils, array) if isinstance(array, Exception) else
                                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(self.output, array)]))
        return responses

    def finalize(self) -> None:
        self.runner.close()
