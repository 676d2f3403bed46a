"""ONNX artifacts shared by the `onnxrt` and `trt` backends: export, reuse, or take the user's `--<part>-onnx`.

An export is one folder under the working dir, `<prefix>-<precision>-<kv|nokv|static>/`, holding one file per part
(decoder-only: `model.onnx`; encoder-decoder: `encoder.onnx`, `decoder.onnx`, `cache_generator.onnx`) and a
fingerprint of the model config, weights identity, export options and library versions; any difference re-exports,
and so does damage to a cached file (its content digest, `NNDF/artifacts.py`), with a warning. A fresh export is
validated against PyTorch (on ONNX Runtime, on the run's device) before it is kept, and the max difference is
recorded in `validation.json` and reported. User files come all together: `--encoder-onnx --decoder-onnx
--cache-generator-onnx` are all-or-nothing for the parts the run needs, and each is checked against the model
before use (`NNDF/integrity.py`: names, vocabulary, layers, heads, dtype). `GraphArtifact` holds the store logic
shared with quantized graphs (`NNDF/backends/onnxrt/quantized.py`), which are built from an export instead of PyTorch.
Each kind's artifact (its adapter for `onnxrt`, and what `trt` builds engines from) subclasses `OnnxArtifact`:
`CausalLM.onnxrt.DecoderOnnx`, `Seq2Seq.onnxrt.Seq2SeqOnnx`, `Vision2Seq.backends.ImageTextOnnx`,
`Encoder.onnxrt.EncoderOnnx`.
"""
from __future__ import annotations

import json
from abc import ABC, abstractmethod
from pathlib import Path

from NNDF.artifacts import digest, weights_identity, write_json_atomic
from NNDF.backends.onnxrt.export import ExportSpec
from NNDF.context import RunContext
from NNDF.errors import ArtifactError, UsageError
from NNDF.integrity import check_user_onnx
from NNDF.options import ModelOptions
from NNDF.parts import given_parts, part_flag
from NNDF.progress import status

VALIDATION = "validation.json"  # max |ONNX - PyTorch| measured when the graph was exported
# Generative models: teacher-forced over these to compare two graphs (quantized vs float); short enough for every
# model's positions.
COMPARE_TEXTS = (
    "The old lighthouse keeper climbed the stairs every evening to light the lamp for the ships at sea.",
    "She opened the letter slowly, read it twice, and then put it back in the drawer without a word.",
    "After the rain stopped, the children ran outside to jump in the puddles along the road.",
)


def user_files(run: RunContext, kind: str, source) -> dict[str, Path] | None:
    """The user's files for this run's parts (checked as `given_parts` does), each of which must exist."""
    paths = given_parts(run.family, run.options.use_cache, kind, source)
    for part, path in (paths or {}).items():
        noun = "an ONNX graph" if kind == "onnx" else "a TensorRT engine"
        problem = (f"is a folder, not {noun} file" if path.is_dir() else "does not exist" if not path.is_file()
                   else f"is empty (0 bytes), not {noun}" if path.stat().st_size == 0 else None)
        if problem:
            raise ArtifactError(f"{part_flag(part, kind)} {path} {problem}")
    return paths


def graph_bytes(paths: dict[str, Path]) -> int:
    """Bytes on disk of these graphs and their external data (`<name>.data` beside each, as exports write it)."""
    files = [p for path in paths.values() for p in (path, path.with_name(path.name + ".data")) if p.is_file()]
    return sum(p.stat().st_size for p in set(files))


def tensor_bytes(paths: dict[str, Path]) -> int:
    """Bytes of the tensors these graphs hold (initializers and constants, external data included, read from the
    graphs' headers): their weights, without the graph's own text (node names and metadata, a quarter of a tiny
    model's file)."""
    import math

    import onnx

    def size(t) -> int:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            length = {e.key: e.value for e in t.external_data}.get("length")
            if length is not None:
                return int(length)
        elif t.HasField("raw_data"):
            return len(t.raw_data)
        return math.prod(t.dims) * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize

    total = 0
    for path in set(paths.values()):
        graph = onnx.load(str(path), load_external_data=False).graph
        constants = [a.t for node in graph.node for a in node.attribute if a.type == onnx.AttributeProto.TENSOR]
        total += sum(map(size, [*graph.initializer, *constants]))
    return total


class GraphArtifact(ABC):
    """Graphs a run uses, kept in the artifact store: where they come from (the user's files, a current artifact, or
    a build now) and what their validation at build time said. `OnnxArtifact` exports from PyTorch;
    `NNDF.backends.onnxrt.quantized.QuantizedOnnx` quantizes another artifact's graphs."""

    prefix = "model"
    static_export = True  # a static-cache run may take this kind's torch.onnx export (False: only a built graph)

    def __init__(self, spec: ExportSpec, task):
        self.spec, self.task = spec, task
        self.max_diff: float | None = None  # max |output - PyTorch| when validated (None: not measured)

    def parts(self, use_cache: bool) -> tuple[str, ...]:
        return self.task.parts(use_cache)

    @abstractmethod
    def steps(self, run: RunContext, paths: dict[str, Path]):
        """The step functions over these graphs on ONNX Runtime."""

    @abstractmethod
    def artifact_name(self, run: RunContext) -> str:
        """The artifact's folder name in the store."""

    @abstractmethod
    def fingerprint(self, run: RunContext) -> dict:
        """Everything the graphs depend on: any change rebuilds them."""

    @abstractmethod
    def build_into(self, model, run: RunContext, out_dir: Path) -> dict:
        """Build the parts into `out_dir` and validate them; returns the validation record (`validation.json`)."""

    def validation_outputs(self, run: RunContext, steps):
        """[N, V] rows two graphs of this artifact are compared on (a quantized graph against the float one):
        generative models' teacher-forced log-probabilities over `COMPARE_TEXTS` (the last 5 tokens of each)."""
        import torch

        task, rows = self.task, []
        for text in COMPARE_TEXTS:
            ids = task.passage_ids(run.tokenizer, text)
            context, target, _ = task.split_passage(ids, 5, run.tokenizer.eos_token_id)
            rows.append(task.teacher_force(run, steps, context, target).cpu())
        return torch.cat(rows)

    def validation_embeddings(self, run: RunContext) -> bool:
        """Whether the `validation_outputs` rows are embeddings (compared by cosine alone) rather than scores over
        classes or tokens (compared by their top-1 too)."""
        return False

    def read_validation(self, record: dict) -> None:
        """Keep what the validation record says (a current artifact's, or one built just now)."""
        self.max_diff = record["max_abs_diff_vs_pytorch"]

    def user_paths(self, run: RunContext) -> dict[str, Path] | None:
        return user_files(run, "onnx", run.options)

    def paths(self, run: RunContext, force: bool = False) -> tuple[dict[str, Path], bool]:
        """The graphs to use ({part: path}) and whether they were built just now: the user's files, or a
        current artifact (built now if missing, stale, or `force`d)."""
        user = self.user_paths(run)
        if user:
            for part, path in user.items():
                self.check_user_file(run, part, path)
            return user, False
        name, fingerprint = self.artifact_name(run), self.fingerprint(run)
        folder = run.store.path(name)
        with run.store.must_build(name, fingerprint, "re-exporting", force,
                                  incomplete=lambda: not (folder / VALIDATION).is_file()) as fresh:
            if fresh:
                self._build(run, name, fingerprint)
        self.read_validation(json.loads((folder / VALIDATION).read_text()))
        return {part: folder / self.file_name(part) for part in self.parts(run.options.use_cache)}, fresh

    def _build(self, run: RunContext, name: str, fingerprint: dict) -> None:
        model = self.source_model(run)
        with run.store.build(name, fingerprint, self.build_bytes(run, model)) as tmp, status(self.building(run)):
            write_json_atomic(tmp / VALIDATION, self.build_into(model, run, tmp))

    def building(self, run: RunContext) -> str:
        """The status line while the artifact is built."""
        return f"exporting {run.source.variant} to ONNX"

    def build_bytes(self, run: RunContext, model) -> int:
        """About the bytes a build writes (checked against the free disk before it starts): the model's weights."""
        return sum(p.numel() * p.element_size() for p in model.parameters()) if model is not None else 0

    def source_model(self, run: RunContext):
        """What `build_into` builds from (the run's PyTorch model; None when it builds from other graphs)."""
        return run.torch_model()

    def check_options(self, run: RunContext) -> None:
        """Refuse flags this kind cannot honour on ONNX Runtime (generative: CUDA graphs need the static cache)."""
        run.options.check_graph_needs_static("onnxrt")

    def fused(self, builder, run: RunContext) -> "GraphArtifact":
        """The family's fused decode graph (`builder`, a `FusedBuilder`) in place of this artifact, for
        `--fused-decode`; kinds without one refuse it."""
        raise UsageError(f"--fused-decode: {self.task.kind} models have no fused decode graph; drop --fused-decode")

    def check_user_file(self, run: RunContext, part: str, path: Path) -> None:
        """ArtifactError when the user's `--<part>-onnx` file does not fit the run's model (before it is used)."""
        check_user_onnx(run, part, path)

    def file_name(self, part: str) -> str:
        return f"{part}.onnx"


class OnnxArtifact(GraphArtifact):
    """Graphs exported from the run's PyTorch model. Subclasses say how to export and validate the parts their
    task has, and how to run them on ONNX Runtime."""

    @abstractmethod
    def export(self, model, out_dir: Path, options: ModelOptions) -> dict[str, Path]:
        """Export the parts to `out_dir`; returns {part: path}."""

    @abstractmethod
    def check(self, model, run: RunContext, paths: dict[str, Path]) -> float:
        """Validate the graphs against PyTorch; returns the max abs logits difference."""

    def artifact_name(self, run: RunContext) -> str:
        return f"{self.prefix}-{run.options.precision}-{run.options.cache_layout}"

    def fingerprint(self, run: RunContext) -> dict:
        import onnx
        import torch
        import transformers

        return {
            "config": digest(run.source.config.to_dict()),
            "weights": weights_identity(run.source.local_dir, run.source.location),
            "export": {"precision": run.options.precision, "cache": run.options.cache_layout,
                       "device": run.device.type, "spec": repr(self.spec)},
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "onnx": onnx.__version__},
        }

    def build_into(self, model, run: RunContext, out_dir: Path) -> dict:
        """Export the parts into `out_dir` and validate them; returns the validation record (`validation.json`:
        at least `max_abs_diff_vs_pytorch`)."""
        made = self.export(model, out_dir, run.options)
        return {"max_abs_diff_vs_pytorch": self.check(model, run, made)}
