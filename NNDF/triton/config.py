"""Triton model configurations as Triton's own protobuf schema (`model_config_pb2.ModelConfig`, shipped in
tritonclient), so every `config.pbtxt` written here is checked by the real schema when it is read back.

Builders cover what this project writes: tensors with `TYPE_*` types, dynamic batching, instance groups
(KIND_CPU / KIND_GPU), python-backend parameters, the decoupled transaction policy, ensemble steps.
`read_config` is strict (unknown fields and bad enum names fail) and names the file in one line.
"""
from __future__ import annotations

from pathlib import Path

from NNDF.errors import ArtifactError

CONFIG = "config.pbtxt"

# dtype name (numpy's; NNDF.integrity's graph and engine signatures use the same names) -> Triton data type
TRITON_TYPES = {"bool": "TYPE_BOOL", "uint8": "TYPE_UINT8", "int32": "TYPE_INT32", "int64": "TYPE_INT64",
                "float16": "TYPE_FP16", "bfloat16": "TYPE_BF16", "float32": "TYPE_FP32", "float64": "TYPE_FP64",
                "object": "TYPE_STRING"}
# a served generative model's per-request settings: name -> Triton type (all [1], optional)
SETTINGS = {"max_new_tokens": "TYPE_INT32", "min_new_tokens": "TYPE_INT32", "num_beams": "TYPE_INT32",
            "top_k": "TYPE_INT32", "no_repeat_ngram_size": "TYPE_INT32", "do_sample": "TYPE_BOOL",
            "ignore_generation_config": "TYPE_BOOL", "temperature": "TYPE_FP32", "top_p": "TYPE_FP32",
            "repetition_penalty": "TYPE_FP32", "length_penalty": "TYPE_FP32", "early_stopping": "TYPE_STRING",
            "seed": "TYPE_INT64"}


def pb():
    """Triton's model configuration protobuf module (imported on use: tritonclient is a serving dependency)."""
    from tritonclient.grpc import model_config_pb2

    return model_config_pb2


def graph_dims(shape: tuple) -> tuple[int, ...]:
    """Config dims of a graph tensor [batch, ...] (an `NNDF.integrity.Tensor` shape): without the batch axis, -1
    for a dynamic dimension."""
    return tuple(-1 if d is None else int(d) for d in shape[1:])


def tensor(name: str, data_type: str, dims: tuple[int, ...], optional: bool = False, output: bool = False):
    """A ModelInput / ModelOutput: `data_type` a `TYPE_*` name, `dims` without the batch axis (-1: variable)."""
    m = pb()
    if data_type not in m.DataType.keys():
        raise ValueError(f"unknown Triton data type {data_type!r}")
    spec = (m.ModelOutput if output else m.ModelInput)(name=name, data_type=m.DataType.Value(data_type),
                                                        dims=list(dims))
    if optional and not output:
        spec.optional = True
    return spec


def instance_group(count: int = 1, gpu: bool = False):
    m = pb()
    kind = m.ModelInstanceGroup.Kind.Value("KIND_GPU" if gpu else "KIND_CPU")
    return m.ModelInstanceGroup(count=count, kind=kind)


def model_config(name: str, *, backend: str = "", platform: str = "", max_batch_size: int = 0, inputs=(),
                 outputs=(), instances: int = 1, gpu: bool = False, parameters: dict | None = None,
                 dynamic_batching: tuple[int, ...] | None = None, queue_delay_us: int = 0,
                 decoupled: bool = False):
    """A ModelConfig. `dynamic_batching`: preferred batch sizes (empty tuple: batching on, no preference; None:
    off); `parameters`: string key/values (python backend: e.g. EXECUTION_ENV_PATH)."""
    m = pb()
    config = m.ModelConfig(name=name, backend=backend, platform=platform, max_batch_size=max_batch_size)
    config.input.extend(inputs)
    config.output.extend(outputs)
    if instances:
        config.instance_group.append(instance_group(instances, gpu))
    add_parameters(config, parameters or {})
    if dynamic_batching is not None:
        config.dynamic_batching.preferred_batch_size.extend(dynamic_batching)
        config.dynamic_batching.max_queue_delay_microseconds = queue_delay_us
    if decoupled:
        config.model_transaction_policy.decoupled = True
    return config


def add_parameters(config, parameters: dict) -> None:
    """String key/values added to a ModelConfig's parameters."""
    for key, value in parameters.items():
        config.parameters[key].string_value = str(value)


def ensemble_step(model: str, input_map: dict[str, str], output_map: dict[str, str], version: int = -1):
    """One step of an ensemble: the model's tensor names -> the ensemble's (input_map / output_map keys are the
    step model's names)."""
    m = pb()
    step = m.ModelEnsembling.Step(model_name=model, model_version=version)
    step.input_map.update(input_map)
    step.output_map.update(output_map)
    return step


def ensemble(name: str, steps, inputs=(), outputs=(), max_batch_size: int = 0):
    m = pb()
    config = m.ModelConfig(name=name, platform="ensemble", max_batch_size=max_batch_size)
    config.input.extend(inputs)
    config.output.extend(outputs)
    config.ensemble_scheduling.step.extend(steps)
    return config


def to_text(config) -> str:
    from google.protobuf import text_format

    return text_format.MessageToString(config)


def write_config(model_dir: Path, config) -> Path:
    """Write `<model_dir>/config.pbtxt` (text format) through a temporary file renamed into place."""
    from NNDF.artifacts import file_mode

    model_dir.mkdir(parents=True, exist_ok=True)
    path = model_dir / CONFIG
    tmp = model_dir / f".{CONFIG}.tmp"
    tmp.write_text(to_text(config))
    tmp.chmod(file_mode())
    tmp.replace(path)
    return path


def read_config(path: Path):
    """Parse a config.pbtxt strictly against Triton's schema; ArtifactError naming the file otherwise."""
    from google.protobuf import text_format

    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"{path}: cannot read it ({exc.__class__.__name__}: {exc})") from exc
    try:
        return text_format.Parse(text, pb().ModelConfig())
    except text_format.ParseError as exc:
        raise ArtifactError(f"{path}: not a valid Triton model configuration ({exc})") from exc


def data_type_name(config_tensor) -> str:
    """The `TYPE_*` name of a ModelInput / ModelOutput."""
    return pb().DataType.Name(config_tensor.data_type)
