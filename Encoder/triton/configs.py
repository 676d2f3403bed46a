"""The Triton model configurations of an encoder deployment (transformer-deploy's layout: tokenizer + model +
ensemble), and the check that a model file's inputs and outputs match its configuration.

For a deployment named N (token ids are INT64 [batch, tokens]; the batch axis is Triton's, `max_batch_size`):

    N_tokenize      python            text BYTES [1]  ->  input_ids, attention_mask[, token_type_ids] INT64 [-1]
    N_model         onnxruntime_onnx  the token ids   ->  embeddings [H] | logits [C] | logits [-1, C]
                    (or tensorrt_plan)
    N_model_python  python            the same, running the same ONNX file on the project's onnxrt steps
    N               ensemble          text -> N_tokenize -> N_model         -> the head's output
    N_python        ensemble          text -> N_tokenize -> N_model_python  -> the head's output

Every model but the ensembles has dynamic batching (`--preferred-batch-size`, `--batch-delay-us`) when
`--max-batch-size` > 1. Triton batches requests only when their shapes match, except for inputs that allow
ragged batches: the python model's ids allow them (it pads a batch of requests itself), so requests of any
length share a forward; N_model batches requests of equal length (ONNX Runtime's and TensorRT's backends take
ragged inputs only as 1-D tensors, which this graph is not).

The tensor types and shapes come from the ONNX graph (`NNDF.integrity.onnx_signature`); `config_problems` reads a
written config back and compares it with the file it serves.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from Encoder.triton.names import Names  # noqa: F401 (deploy's names)
from NNDF.triton import config as tc

PLATFORMS = {"onnxrt": ("onnxruntime_onnx", "model.onnx"), "trt": ("tensorrt_plan", "model.plan")}
PYTHON_ONNX = "model.onnx"  # the python flavour's graph, in its version folder


@dataclass(frozen=True)
class Batching:
    """Batching of the deployment (from DeployOptions)."""

    max_batch_size: int
    preferred: tuple[int, ...] = ()
    delay_us: int = 0
    instances: int = 1
    gpu: bool = False

    @property
    def dynamic(self) -> tuple[int, ...] | None:
        return self.preferred if self.max_batch_size > 1 else None


def _specs(tensors: dict, output: bool = False, ragged: bool = False) -> list:
    specs = []
    for name, t in tensors.items():
        spec = tc.tensor(name, tc.TRITON_TYPES[t.dtype], tc.graph_dims(t.shape), output=output)
        if ragged and not output:
            spec.allow_ragged_batch = True  # the python model pads a batch of requests of different lengths
        specs.append(spec)
    return specs


def tokenize_config(names: Names, signature, batching: Batching, max_length: int):
    inputs = [tc.tensor("text", "TYPE_STRING", (1,))]
    outputs = [tc.tensor(name, "TYPE_INT64", (-1,), output=True) for name in signature.inputs]
    params = {"max_length": max_length, "input_names": ",".join(signature.inputs)}
    return tc.model_config(names.tokenize, backend="python", max_batch_size=batching.max_batch_size, inputs=inputs,
                           outputs=outputs, instances=batching.instances, parameters=params,
                           dynamic_batching=batching.dynamic, queue_delay_us=batching.delay_us)


def model_config(names: Names, signature, batching: Batching, backend: str):
    """N_model: Triton's ONNX Runtime backend (onnxrt) or TensorRT backend (trt) on the graph / engine."""
    platform, filename = PLATFORMS[backend]
    config = tc.model_config(names.model, platform=platform, max_batch_size=batching.max_batch_size,
                             inputs=_specs(signature.inputs), outputs=_specs(signature.outputs, output=True),
                             instances=batching.instances, gpu=batching.gpu or backend == "trt",
                             dynamic_batching=batching.dynamic, queue_delay_us=batching.delay_us)
    config.default_model_filename = filename
    return config


def model_python_config(names: Names, signature, batching: Batching, pad_token_id: int, vocab: int,
                        threads: int = 0):
    """N_model_python; `threads`: ONNX Runtime's intra-op threads per instance (--threads; 0: its default)."""
    params = {"onnx_file": PYTHON_ONNX, "pad_token_id": pad_token_id, "vocab_size": vocab, "threads": threads}
    return tc.model_config(names.model_python, backend="python", max_batch_size=batching.max_batch_size,
                           inputs=_specs(signature.inputs, ragged=True),
                           outputs=_specs(signature.outputs, output=True), instances=batching.instances,
                           gpu=batching.gpu, parameters=params, dynamic_batching=batching.dynamic,
                           queue_delay_us=batching.delay_us)


def ensemble_config(name: str, tokenize: str, model: str, signature, batching: Batching):
    """text -> tokenize -> model -> the head's output (tensor names are the same at every step)."""
    ids = {n: n for n in signature.inputs}
    outputs = {n: n for n in signature.outputs}
    steps = [tc.ensemble_step(tokenize, {"text": "text"}, ids), tc.ensemble_step(model, ids, outputs)]
    return tc.ensemble(name, steps, inputs=[tc.tensor("text", "TYPE_STRING", (1,))],
                       outputs=_specs(signature.outputs, output=True), max_batch_size=batching.max_batch_size)


# --- checks -----------------------------------------------------------------------------------------------------

def _tensor_problems(kind: str, specs, tensors: dict, batched: bool) -> list[str]:
    problems = []
    configured = {s.name: s for s in specs}
    if set(configured) != set(tensors):
        problems.append(f"{kind}s {sorted(configured)} in the config, {sorted(tensors)} in the file")
    for name in sorted(set(configured) & set(tensors)):
        spec, t = configured[name], tensors[name]
        want_type, got_type = tc.TRITON_TYPES.get(t.dtype, t.dtype), tc.data_type_name(spec)
        shape = tuple(t.shape[1:] if batched else t.shape)
        dims = tuple(spec.dims)
        if got_type != want_type:
            problems.append(f"{kind} {name} is {got_type} in the config, {t.dtype} in the file")
        if dims != tc.graph_dims((None, *shape)):
            file_dims = ["batch"] * batched + [-1 if s is None else s for s in shape]
            problems.append(f"{kind} {name} has dims {list(dims)} in the config, {file_dims} in the file")
    return problems


def config_problems(config, signature) -> list[str]:
    """How a config's inputs and outputs differ from a graph's or engine's (`NNDF.integrity.Signature`): names,
    types, and dims (the file's first axis is the batch when `max_batch_size` > 0; the other dimensions equal
    the file's, -1 where the file's is dynamic, as Triton's ONNX Runtime backend requires)."""
    batched = config.max_batch_size > 0
    return (_tensor_problems("input", config.input, signature.inputs, batched)
            + _tensor_problems("output", config.output, signature.outputs, batched))


def check_config_file(config_path: Path, model_file: Path, signature) -> None:
    """ArtifactError naming both files when the written config does not match the model file it serves."""
    from NNDF.errors import ArtifactError

    problems = config_problems(tc.read_config(config_path), signature)
    if problems:
        raise ArtifactError(f"{config_path} does not match {model_file}: {'; '.join(problems)}")
