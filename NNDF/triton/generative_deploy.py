"""`deploy MODEL onnxrt` for the generative kinds (their deploy evaluator): a python-backend model that runs the
project's generation loop over the run's ONNX graphs inside Triton (`NNDF.triton.generative.GenerativeModel`): the
graphs the in-process onnxrt row runs, i.e. the export, or with --static-cache the graphs built from the weights
where that row takes them (`--fused-decode` / `--no-fused-decode` choose as they do for that row; deploy's note
says which); with one `--quantize` value those graphs quantized as that row quantizes them (the default model name
then ends in the row's label, e.g. `<variant>-onnxrt-int4`; serving.json records the quantization's settings).

The version folder is self-contained: `onnx/<part>/` (each graph with its external data), `hf/` (the model's
config, generation config, tokenizer and image-processor files: everything but the weights), `serving.json`
(family, model type, variant, the options that decide how the graphs run, each graph's path, the encoder's
inputs and the request limits: new tokens, beams, KV cache) and `model.py` (the stub). The config's parameters
say what it serves (family, model type), which the `triton` client backend checks before any request. The
model's tensors (all optional; a request gives `text` or `input_ids`):

    text [1] BYTES, image [1] BYTES (image kinds: PNG/JPEG bytes), input_ids [-1] INT64 (the decoder prompt),
    encoder_<name> (encoder-decoder kinds: the encoder graph's inputs, one row), max_new_tokens, min_new_tokens,
    num_beams, top_k, no_repeat_ngram_size [1] INT32, do_sample, ignore_generation_config [1] BOOL,
    temperature, top_p, repetition_penalty, length_penalty [1] FP32, early_stopping [1] BYTES
    (true/false/never), seed [1] INT64  ->  text [1] BYTES, output_ids [-1] INT64 (new tokens, up to EOS).

A setting a request leaves out takes the model's generation config (as `chat` does without the flag).
Teacher forcing (perplexity, accuracy through the `triton` backend): `score_ids` [-1] and `score_positions`
[-1] INT64 (the decoder's ids and positions, with `encoder_<name>` for encoder-decoder kinds) -> `logits`
[-1, -1] FP32, one forward pass from an empty cache.
With `--streaming` (Triton's decoupled mode) each greedy / sampled token is sent as it is chosen (a response
with `output_ids` [1] alone), then the whole answer (`output_ids` and `text`) and the final flag.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass, fields, replace
from pathlib import Path

from NNDF.errors import UsageError
from NNDF.evaluate import Evaluator
from NNDF.options import ModelOptions
from NNDF.triton import config as tc
from NNDF.triton.options import DeployOptions
from NNDF.backends.triton.names import serves
from NNDF.triton.repository import SAME_ARTIFACTS, command

SERVING = "serving.json"
# ModelOptions fields that decide how the graphs run in the server (recorded in serving.json)
SERVED_OPTIONS = ("use_cache", "static_cache", "fused_decode", "fp16", "threads", "use_mask")
OUTPUTS = {"text": ("TYPE_STRING", (1,)), "output_ids": ("TYPE_INT64", (-1,)), "logits": ("TYPE_FP32", (-1, -1))}
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".h5", ".msgpack", ".ckpt", ".onnx")


def copy_model_files(source_dir: Path | None, folder: Path, variant: str) -> None:
    """The model folder's config, generation config, tokenizer and processor files (not the weights)."""
    if source_dir is None:
        raise UsageError(f"deploy copies the model's tokenizer and config files from a local folder; {variant} is a "
                         "hub id: download it and give --torch-dir DIR")
    folder.mkdir(parents=True)
    for item in sorted(source_dir.iterdir()):
        if item.is_file() and not item.name.endswith(WEIGHT_SUFFIXES) and not item.name.endswith(".index.json"):
            shutil.copy2(item, folder / item.name)


def reads_images(task, options: ModelOptions) -> bool:
    """Whether the task's items need an image (its `items` refuses a text alone)."""
    try:
        task.items(replace(options, image=()), ("",))
    except UsageError:
        return True
    return False


def model_config(name: str, encoder: dict, images: bool, deploy: DeployOptions, serves: dict[str, str],
                 gpu: bool = False):
    """The Triton config of the generative python model (see the module docstring for the tensors); its
    parameters say what it serves (`serves`: family and model type, as in serving.json), which the `triton`
    client backend checks before any request."""
    inputs = [tc.tensor("text", "TYPE_STRING", (1,), optional=True),
              tc.tensor("input_ids", "TYPE_INT64", (-1,), optional=True),
              tc.tensor("score_ids", "TYPE_INT64", (-1,), optional=True),
              tc.tensor("score_positions", "TYPE_INT64", (-1,), optional=True)]
    if images:
        inputs.append(tc.tensor("image", "TYPE_STRING", (1,), optional=True))
    inputs += [tc.tensor(f"encoder_{name}", tc.TRITON_TYPES[t.dtype], tc.graph_dims(t.shape), optional=True)
               for name, t in encoder.items()]  # the encoder graph's inputs (NNDF.integrity.Tensor each)
    inputs += [tc.tensor(key, kind, (1,), optional=True) for key, kind in tc.SETTINGS.items()]
    for spec in inputs:
        if -1 in spec.dims:
            spec.allow_ragged_batch = True  # requests of different lengths share a batch (padded by the model)
    outputs = [tc.tensor(key, kind, dims, output=True) for key, (kind, dims) in OUTPUTS.items()]
    batching = tuple(deploy.preferred_batch_size) if deploy.max_batch_size > 1 else None
    return tc.model_config(name, backend="python", max_batch_size=deploy.max_batch_size, inputs=inputs,
                           outputs=outputs, instances=deploy.instances, gpu=gpu, parameters=serves,
                           dynamic_batching=batching, queue_delay_us=deploy.batch_delay_us,
                           decoupled=deploy.streaming)


def serving_record(run, parts: dict[str, str], built: bool, encoder: dict, images: bool,
                   deploy: DeployOptions, quantization: dict | None = None) -> dict:
    import onnxruntime
    import torch
    import transformers

    options = {f.name: getattr(run.options, f.name) for f in fields(ModelOptions) if f.name in SERVED_OPTIONS}
    options["use_mask"] = True  # requests of different lengths are batched with padding
    return {**serves(run), "variant": run.source.variant, "backend": "onnxrt",
            "device": run.device.type, "options": options, "parts": parts,
            "graphs": "built" if built else "export",  # built from the weights (static cache), or the export
            "encoder_inputs": list(encoder), "images": images,
            "max_new_tokens_limit": deploy.max_new_tokens_limit, "num_beams_limit": deploy.num_beams_limit,
            "cache_limit_mib": deploy.cache_limit_mib, "streaming": deploy.streaming,
            "quantization": quantization,  # the graphs' (their artifact's settings), None for the float graphs
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                         "onnxruntime": onnxruntime.__version__}}


@dataclass(frozen=True)
class DeployedModel:
    model: str
    repository: str
    runs_on: str
    max_batch_size: int
    files: int

    def row(self) -> dict:
        return {"model": self.model, "repository": self.repository, "runs on": self.runs_on,
                "max batch": self.max_batch_size, "files": self.files}


def refuse_backend_flags(family: str, backend_options) -> None:
    """The deployed model runs the onnxrt backend's export, or its one quantization (`--quantize` and the flags
    that tune it): any other backend-owned flag would be ignored, so it is refused in one line."""
    from dataclasses import fields as fields_of

    from NNDF.backends.onnxrt.options import QuantizeOptions

    served = {f.name for f in fields_of(QuantizeOptions)}
    for group in backend_options:
        default = type(group)()
        changed = [f.name for f in fields_of(group)
                   if f.name not in served and getattr(group, f.name) != getattr(default, f.name)]
        if changed:
            flag = type(group).flag_name(changed[0], getattr(group, changed[0]))
            raise UsageError(f"deploy {family} onnxrt does not apply {flag}: the served model runs the onnxrt "
                             "backend's exported graphs (or their --quantize quantization)")


DEPLOYABLE = ("onnxrt",)
REFUSED = {"trt": "a python model over TensorRT engines is not written: TensorRT execution inside Triton is "
                  "unverified here (no GPU); deploy onnxrt, or serve engines with NVIDIA's container",
           "frameworks": "the PyTorch weights are not deployed (the served model runs exported graphs): deploy "
                         "onnxrt"}


class GenerativeDeploy(Evaluator):
    """`deploy` for the generative kinds: `<repository>/<name>/`, the generative python model over the run's ONNX
    Runtime graphs."""

    def __init__(self, action: str, options: ModelOptions, deploy: DeployOptions) -> None:
        super().__init__(action, options, deploy)
        self.deploy = deploy

    def choose(self, family: str, backends: tuple[str, ...]) -> str:
        """The one backend deployed; TensorRT and PyTorch are refused in one line."""
        if len(backends) != 1:
            raise UsageError(f"deploy writes one backend's model: name one of {', '.join(DEPLOYABLE)}")
        name = backends[0]
        if name in REFUSED:
            raise UsageError(f"deploy {family} {name}: {REFUSED[name]}")
        if name not in DEPLOYABLE:
            raise UsageError(f"deploy {family} {name}: cannot deploy the {name} backend; deployable: "
                             f"{', '.join(DEPLOYABLE)}")
        return name

    def opening(self, family: str, backend: str, backend_options: tuple) -> tuple:
        """(options, backends, backend option groups) the run opens with: the exported graphs, or their one
        quantization; no other backend flag."""
        refuse_backend_flags(family, backend_options)
        return self.options, (backend,), backend_options

    def write(self, run, backend: str, repository: Path, report) -> None:
        from NNDF.artifacts import write_json_atomic
        from NNDF.integrity import onnx_signature
        from NNDF.triton.repository import (VERSION, check_model_name, check_target, copy_graph, default_model_name,
                                           deployed_variant, staged_model, write_stub)

        deploy, options = self.deploy, self.options
        chosen = deployed_variant(run, backend)
        name = check_model_name(deploy.model_name
                                or default_model_name(run.family.name, run.source.variant, chosen.label))
        check_target(repository, name, deploy.force)  # before any export: a refused deploy costs nothing
        # the graphs its in-process row runs (made now where no current artifact exists): the export (quantized for
        # a --quantize variant), or with --static-cache the graphs built from the weights where that row takes them
        graphs, built = chosen.served_graphs(run)
        quantization = None if chosen.quantization is None else chosen.quantization.settings()
        encoder = onnx_signature(graphs["encoder"]).inputs if "encoder" in graphs else {}
        images = reads_images(run.family.task, options)
        config = model_config(name, encoder, images, deploy, serves(run),
                              gpu=run.device.type == "cuda")  # KIND_GPU (unverified)
        with staged_model(repository, name, deploy.force) as stage:
            version = stage / VERSION
            parts = {part: copy_graph(path, version / "onnx" / part).relative_to(version).as_posix()
                     for part, path in graphs.items()}
            copy_model_files(run.source.local_dir, version / "hf", run.source.variant)
            write_json_atomic(version / SERVING, serving_record(run, parts, built, encoder, images, deploy,
                                                                quantization))
            write_stub(version, "NNDF.triton.generative:GenerativeModel")
            tc.write_config(stage, config)
            files = sum(1 for p in stage.rglob("*") if p.is_file())
        report.settings = {"backend": f"{chosen.label} (python backend)", "max_batch_size": deploy.max_batch_size,
                           "instances": deploy.instances, "use_cache": options.use_cache,
                           "static_cache": options.static_cache, "streaming": deploy.streaming}
        report.results.append(DeployedModel(name, str(repository), "python", deploy.max_batch_size, files))
        query = command("chat", run.family.name, "onnxrt", "triton", *options.as_flags("static_cache", "fused_decode"),
                        *chosen.variant_flags(), "--triton-model", name,
                        *options.as_flags(*SAME_ARTIFACTS, "use_cache"))
        report.notes.append(f"serve it: {command('serve', str(repository))}; query it: {query}")
        if chosen.choice:
            report.notes.append(f"served graphs: {chosen.choice}")
