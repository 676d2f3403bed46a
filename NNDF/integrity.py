"""Checks of files the harness did not build itself, before they are used: one line naming the first problem.

- `damaged_file(folder)`: the first structurally broken file of an HF model folder (`config.json` or another
  JSON file that does not parse, a `*.safetensors` file whose size is not what its header describes, a zip
  checkpoint cut short), for the one-line error behind a failed `from_pretrained` (`NNDF/models.py`).
- `check_user_onnx` / `check_user_engine`: a graph or engine the user gave (`--decoder-onnx`, `--encoder-onnx`,
  `--cache-generator-onnx`, `--decoder-engine`, ...) against the run's model, from its inputs and outputs only:
  names, vocabulary size (the logits' last dimension), layers (the number of `past.*` / `cross.*` tensors),
  heads and head size (their fixed dimensions), the hidden size (the width of the vocabulary-sized weight
  matrix; ONNX only, the one check a graph without KV cache allows), and the dtype (fp16 / fp32, against
  `--fp16`). Anything else (a file ONNX cannot parse, numerics) is left to the runtime, which reports it.

The model's side is `run.source.dims` (`ModelDims`: layers, heads, head size, hidden size, vocabulary).
"""
from __future__ import annotations

import json
import os
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from NNDF.errors import ArtifactError
from NNDF.parts import part_flag


# --- HF model folders -------------------------------------------------------------------------------------

def _safetensors_problem(path: Path) -> str | None:
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return f"truncated: {size} bytes, shorter than a safetensors header"
        length = int.from_bytes(head, "little")
        if length > size - 8:
            return f"truncated: its header says {length} bytes of metadata, the file has {size} bytes"
        try:
            header = json.loads(f.read(length))
            end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
        except (ValueError, KeyError, TypeError, IndexError, AttributeError):
            return "its header is not valid safetensors metadata"
    if 8 + length + end != size:
        return f"truncated: {size} bytes, its header describes {8 + length + end}" if size < 8 + length + end \
            else f"{size} bytes, longer than the {8 + length + end} its header describes"
    return None


def _file_problem(path: Path) -> str | None:
    try:
        if path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix == ".safetensors":
            return _safetensors_problem(path)
        elif path.suffix == ".bin":
            with open(path, "rb") as f:
                zipped = f.read(4) == b"PK\x03\x04"  # torch.save's zip format (older pickles: not checkable)
            if zipped and not zipfile.is_zipfile(path):
                return "truncated: a zip checkpoint without its central directory"
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return f"not valid JSON ({type(exc).__name__})" if path.suffix == ".json" else f"unreadable ({exc})"
    return None


def damaged_file(folder: Path) -> tuple[Path, str] | None:
    """The first broken file of an HF model folder and what is wrong with it (config first, then weights, then
    the rest), or None when every file's structure is intact."""
    files = [p for p in Path(folder).iterdir() if p.is_file() and p.suffix in (".json", ".safetensors", ".bin")]
    order = {"config.json": 0, ".safetensors": 1, ".bin": 1}
    for path in sorted(files, key=lambda p: (order.get(p.name, order.get(p.suffix, 2)), p.name)):
        problem = _file_problem(path)
        if problem:
            return path, problem
    return None


def embedding_rows(folder: Path, hidden: int) -> int | None:
    """Rows of the token embedding in a folder's safetensors weights (a [rows, hidden] matrix whose name says it
    embeds: HF's `embed_tokens`, `wte`, `word_embeddings`, `shared`), read from the headers only; None if none."""
    for path in sorted(Path(folder).glob("*.safetensors")):
        try:
            with open(path, "rb") as f:
                header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
        except (OSError, ValueError):
            continue
        for name, entry in header.items():
            shape = entry.get("shape", []) if isinstance(entry, dict) else []
            if len(shape) == 2 and shape[1] == hidden and re.search(r"embed_tokens|wte|word_embeddings|shared", name):
                return int(shape[0])
    return None


# --- the user's graphs and engines ------------------------------------------------------------------------

@dataclass(frozen=True)
class Tensor:
    shape: tuple  # an int per fixed dimension, None per dynamic one
    dtype: str  # "float32", "float16", "bfloat16", "int64", ...


@dataclass(frozen=True)
class Signature:
    """A graph's or engine's inputs and outputs (in order), and the shapes of its 2-D weights where readable."""

    inputs: dict[str, Tensor]
    outputs: dict[str, Tensor]
    matrices: tuple[tuple[int, int], ...] = ()


_ONNX_TYPES = {"FLOAT": "float32", "FLOAT16": "float16", "BFLOAT16": "bfloat16", "DOUBLE": "float64"}
_SIGNATURES: dict[tuple, Signature | None] = {}  # per file version, this process (paths() runs more than once)


def onnx_signature(path: Path) -> Signature | None:
    """The graph's inputs, outputs and 2-D initializer shapes, read without its external data; None when ONNX
    cannot parse the file (the runtime that loads it reports that, with its own message)."""
    stat = os.stat(path)
    key = (str(path), stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    if key not in _SIGNATURES:
        import onnx

        try:
            graph = onnx.load(str(path), load_external_data=False).graph
        except Exception:  # DecodeError and friends: not our message to make
            _SIGNATURES[key] = None
            return None

        def tensor(value) -> Tensor:
            t = value.type.tensor_type
            name = onnx.TensorProto.DataType.Name(t.elem_type)
            return Tensor(tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim),
                          _ONNX_TYPES.get(name, name.lower()))

        _SIGNATURES[key] = Signature({v.name: tensor(v) for v in graph.input},
                                     {v.name: tensor(v) for v in graph.output},
                                     tuple(tuple(i.dims) for i in graph.initializer if len(i.dims) == 2))
    return _SIGNATURES[key]


def engine_signature(trt, engine) -> Signature:
    """A deserialized engine's inputs and outputs, through TensorRT's API (`num_io_tensors`, `get_tensor_name`,
    `get_tensor_mode`, `get_tensor_shape` (-1 for a dynamic dimension), `get_tensor_dtype`).
    UNVERIFIED against a real engine: TensorRT cannot be installed where this was written; the tests run it on an
    object that mimics that API."""
    labels = {getattr(trt, name): name for name in ("float32", "float16", "bfloat16", "int64", "int32", "int8", "bool")
              if hasattr(trt, name)}
    inputs, outputs = {}, {}
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        dtype = engine.get_tensor_dtype(name)
        tensor = Tensor(tuple(int(d) if int(d) >= 0 else None for d in engine.get_tensor_shape(name)),
                        labels.get(dtype, str(dtype).split(".")[-1].lower()))
        (inputs if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT else outputs)[name] = tensor
    return Signature(inputs, outputs)


_LAYERED = re.compile(r"^(past|present|cross)\.(\d+)\.(key|value)$")


def _layers(tensors: dict[str, Tensor], prefix: str) -> dict[str, Tensor]:
    return {n: t for n, t in tensors.items() if (m := _LAYERED.match(n)) and m.group(1) == prefix}


def _names_problem(sig: Signature, run, part: str, noun: str) -> str | None:
    """A missing, unexpected or wrong-kind input/output name, phrased as what the file is not."""
    options = run.options
    use_cache, cache = options.use_cache, "with" if options.use_cache else "without"
    seq2seq = "encoder" in run.family.task.parts(use_cache)  # the decoder of an encoder-decoder model
    ins, outs = sig.inputs, sig.outputs
    if part == "encoder":
        return None if "encoder_hidden_states" in outs else \
            f"is not an encoder {noun} as this harness exports it (no encoder_hidden_states output)"
    if part == "cache_generator":
        if "encoder_hidden_states" not in ins or not _layers(outs, "cross"):
            return f"is not a cache-generator {noun} as this harness exports it (encoder_hidden_states -> cross.*)"
        return None
    has_past = bool(_layers(ins, "past"))
    if has_past != use_cache:
        fix = "drop --no-use-cache" if has_past else "add --no-use-cache"
        what = f"the decoder {noun}" if seq2seq else f"a decoder {noun}"
        return (f"is not {what} {cache} KV cache as this harness exports it (it has {'' if has_past else 'no '}"
                f"past.* inputs): {fix}, or give a {noun} exported {cache} it")
    if "logits" not in outs:
        return f"is not a decoder {noun} as this harness exports it (no logits output)"
    if seq2seq:
        need = {"input_ids", "encoder_attention_mask"} | (set() if use_cache else {"encoder_hidden_states"})
        optional: set[str] = set()
    else:
        if ("cache_position" in ins) != options.static_cache:
            want = "a static-cache" if options.static_cache else "a growing-cache"
            return f"is not {want} decoder {noun} (--static-cache must match how it was exported)"
        need = {"input_ids", "attention_mask"} | ({"cache_position"} if options.static_cache else set())
        optional = {"position_ids"}
    for name in sorted(need - set(ins)):
        return f"does not fit {_model(run)}: it has no input {name}"
    for name in ins:
        if name not in need | optional and not _LAYERED.match(name):
            return f"does not fit {_model(run)}: it has an input {name} that this model's decoder does not take"
    if seq2seq and use_cache and not _layers(ins, "cross"):
        return f"does not fit {_model(run)}: it has no cross.* inputs (the cross-attention keys and values)"
    return None


def _model(run) -> str:
    return f"{run.family.name} {run.source.variant}"


def _count_problem(tensors: dict[str, Tensor], prefix: str, kind: str, layers: int, model: str) -> str | None:
    names = set(_layers(tensors, prefix))
    found = {int(_LAYERED.match(n).group(2)) for n in names}
    if found != set(range(layers)) or len(names) != 2 * len(found):
        return f"it has {len(found)} layers ({prefix}.*.key/value {kind}), {model} has {layers}"
    return None


def mismatch(sig: Signature, run, part: str, noun: str = "graph") -> str | None:
    """The first way the graph or engine (`noun`) `sig`, given as `part`, does not fit the run's model: a clause
    that follows '<flag> <path> ', or None when it fits."""
    problem = _names_problem(sig, run, part, noun)
    if problem:
        return problem
    dims, model = run.source.dims, _model(run)
    fits = f"does not fit {model}: "
    logits = sig.outputs.get("logits")
    if logits is not None and logits.shape and logits.shape[-1] is not None and logits.shape[-1] != dims.vocab:
        return fits + f"its logits have {logits.shape[-1]} entries (vocabulary size), {model} has {dims.vocab}"
    layered = []
    if part == "decoder" and run.options.use_cache:
        layered = [(sig.inputs, "past", "inputs"), (sig.outputs, "present", "outputs")]
        layered += [(sig.inputs, "cross", "inputs")] if _layers(sig.inputs, "cross") else []
    elif part == "cache_generator":
        layered = [(sig.outputs, "cross", "outputs")]
    for tensors, prefix, kind in layered:
        problem = _count_problem(tensors, prefix, kind, dims.layers, model)
        if problem:
            return fits + problem
    for tensors, prefix, _ in layered:
        # the self-attention cache has the key/value heads (grouped-query attention); cross attention all heads
        heads, head_dim = (dims.heads if prefix == "cross" else dims.kv_heads or dims.heads), dims.head_dim
        for name, t in _layers(tensors, prefix).items():
            if len(t.shape) != 4:
                return fits + f"its {name} has {len(t.shape)} dimensions, not [batch, heads, length, head size]"
            if (t.shape[1] not in (None, heads)) or (t.shape[3] not in (None, head_dim)):
                return fits + (f"its {name} has {t.shape[1]} heads of size {t.shape[3]}, {model} has {heads} heads "
                               f"of size {head_dim}")
    if part == "decoder" and sig.matrices:
        widths = {b if a == dims.vocab else a for a, b in sig.matrices if dims.vocab in (a, b)}
        if widths and dims.hidden not in widths:
            return fits + (f"its vocabulary-sized weight is {dims.vocab} x {min(widths)}, {model}'s hidden size is "
                           f"{dims.hidden}")
    want = "float16" if run.options.fp16 else "float32"
    for name, t in {**sig.inputs, **sig.outputs}.items():
        if "float" in t.dtype and t.dtype != want:
            flag = "with --fp16" if run.options.fp16 else "without --fp16"
            return fits + (f"it is a {t.dtype} {noun} ({name} is {t.dtype}), this run is {want} ({flag}): give a "
                           f"{want} {noun}, or {'drop' if run.options.fp16 else 'add'} --fp16")
    return None


def check_user_onnx(run, part: str, path: Path) -> None:
    """ArtifactError naming the first mismatch between the user's `--<part>-onnx` graph and the run's model."""
    sig = onnx_signature(path)
    if sig is not None and not sig.inputs and not sig.outputs:  # protobuf reads almost any bytes as an empty model
        raise ArtifactError(f"{part_flag(part, 'onnx')} {path} is not an ONNX graph (it has no inputs or outputs)")
    problem = mismatch(sig, run, part) if sig is not None else None
    if problem:
        raise ArtifactError(f"{part_flag(part, 'onnx')} {path} {problem}")


def check_user_engine(trt, engine, run, part: str, path: Path) -> None:
    """The same for a deserialized `--<part>-engine` (no weights to read: the hidden-size check is ONNX only).
    UNVERIFIED with TensorRT itself (see `engine_signature`)."""
    problem = mismatch(engine_signature(trt, engine), run, part, noun="engine")
    if problem:
        raise ArtifactError(f"{part_flag(part, 'engine')} {path} {problem}")
