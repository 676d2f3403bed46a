"""`deploy` for encoder models (their deploy evaluator): a Triton model repository in transformer-deploy's layout
(tokenizer + model + ensemble), plus a python flavour of the model that runs with the python backend alone
(Encoder/triton/configs.py lists the five models and their tensors).

- `deploy BERT onnxrt --repository DIR`: the graph the onnxrt backend runs (ONNX Runtime's optimizer output by
  default, `--no-ort-optimize` the plain export) as `N_model/1/model.onnx` (`onnxruntime_onnx`) and as the
  python flavour's `N_model_python/1/model.onnx`; the run's tokenizer in `N_tokenize/1/tokenizer/`.
- `deploy BERT trt --repository DIR`: `N_model` is a `tensorrt_plan` whose engine profile covers
  [1 .. --max-batch-size] x the sequence profile (--seq-len, default 1 .. the model's limit). The engine is
  copied in when TensorRT is here (built or found current by the trt backend) or the user gives
  `--encoder-engine FILE`; otherwise the config is written without `1/model.plan` and the report (and the
  repository README) says how to build it with trtexec in the serving container. The python flavour runs the
  plain ONNX export the engine is built from.

Every config is read back with Triton's schema, and each model file's inputs and outputs are checked against
its config (names, types, dims). `onnxruntime_onnx` and `tensorrt_plan` need Triton's ONNX Runtime / TensorRT
backends: NVIDIA's container has them, the nvidia-pytriton wheel (`run.py serve` here) does not, so here the
python flavour (`N_python`, `N_model_python`, `N_tokenize`) is what runs.
"""
from __future__ import annotations

import shutil
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

from Encoder.triton.configs import (PYTHON_ONNX, Batching, Names, check_config_file, ensemble_config,
                                    model_config, model_python_config, tokenize_config)
from NNDF.errors import UsageError
from NNDF.evaluate import Evaluator
from NNDF.options import ModelOptions
from NNDF.results import Report
from NNDF.triton.options import DeployOptions

DEPLOYABLE = ("onnxrt", "trt")


@dataclass(frozen=True)
class DeployedEncoder:
    model: str
    runs_on: str  # the Triton backend / platform
    inputs: str
    outputs: str
    files: int

    def row(self) -> dict:
        return {"model": self.model, "runs on": self.runs_on, "inputs": self.inputs, "outputs": self.outputs,
                "files": self.files}


def _backend(backends: tuple[str, ...]) -> str:
    if len(backends) != 1 or backends[0] not in DEPLOYABLE:
        given = " ".join(backends) or "none"
        raise UsageError(f"deploy writes one backend's model (got {given}): name onnxrt (ONNX Runtime) or trt "
                         "(TensorRT); frameworks is not deployed (the served model runs an exported graph)")
    return backends[0]


def _trt_options(backend_options: tuple, batching: Batching) -> tuple:
    """TensorRT's option group (added when absent) with the engine's batch profile [1, opt, --max-batch-size]
    unless one is given: Triton hands the engine any batch up to its max_batch_size."""
    from NNDF.backends.trt.options import TRTOptions

    given = next((g for g in backend_options if isinstance(g, TRTOptions)), TRTOptions())
    if not given.batch_profile and not given.dynamic_batch:
        top = batching.max_batch_size
        given = replace(given, batch_profile=(1, max(batching.preferred or (top,)), top))
    return (*(g for g in backend_options if not isinstance(g, TRTOptions)), given)


def _copy_graph(source: Path, version: Path, name: str) -> Path:
    """The graph (and the external data it names) into `version`, as `name`."""
    from NNDF.triton.repository import copy_graph

    copied = copy_graph(source, version)
    return copied.rename(version / name)


class EncoderDeploy(Evaluator):
    """`deploy` for encoder models: tokenizer, model and ensembles, each config checked against its model file."""

    def __init__(self, action: str, options: ModelOptions, deploy: DeployOptions) -> None:
        super().__init__(action, options, deploy)
        self.deploy = deploy
        self.batching = Batching(deploy.max_batch_size, tuple(deploy.preferred_batch_size), deploy.batch_delay_us,
                                 deploy.instances)

    def choose(self, family: str, backends: tuple[str, ...]) -> str:
        return _backend(backends)

    def opening(self, family: str, backend: str, backend_options: tuple) -> tuple:
        """The batch is the served one; the trt backend is not opened here: its engine is optional (see
        `_engine`), the export is not."""
        groups = _trt_options(backend_options, self.batching) if backend == "trt" else backend_options
        return (replace(self.options, batch_size=self.batching.max_batch_size),
                (backend,) if backend == "onnxrt" else (), groups)

    def write(self, run, backend: str, repository: Path, report) -> None:
        from NNDF.integrity import onnx_signature
        from NNDF.triton.repository import check_model_name, check_target, default_model_name, deployed_variant

        deploy = self.deploy
        batching = replace(self.batching, gpu=run.device.type == "cuda")  # instances where the graph was made for
        # trt's plain export, or onnxrt's graph (optimized unless --no-ort-optimize) or its one --quantize quantization
        chosen = deployed_variant(run, backend)
        names = Names(check_model_name(deploy.model_name
                                       or default_model_name(run.family.name, run.source.variant, chosen.label)))
        for name in names.all:  # refused before anything is exported
            check_target(repository, name, deploy.force)
        graph = chosen.onnx.paths(run)[0]["encoder"]
        signature = onnx_signature(graph)
        engine = _engine(run) if backend == "trt" else None
        report.settings = {
            "backend": chosen.label, "task": run.family.task.head(run.source, run.options).name, "graph": str(graph),
            "repository": str(repository), "max_batch_size": batching.max_batch_size,
            "preferred_batch_size": list(batching.preferred), "batch_delay_us": batching.delay_us,
            "instances": batching.instances}
        query = _query(run, names, chosen)
        _write(run, repository, names, batching, backend, graph, signature, engine, deploy.force, report, query)
        _notes(report, run, repository, names, chosen, engine, query)


# --- TensorRT: the engine, when one can be had here ----------------------------------------------------------

@dataclass(frozen=True)
class Engine:
    path: Path | None  # None: no engine here (the config is written, the plan is not)
    signature: object | None  # the engine's IO (NNDF.integrity.Signature); None: not read (no TensorRT here)
    why: str  # where it came from, or why there is none


def _engine(run) -> Engine:
    """The run's engine: the trt backend's (built or found current) or --encoder-engine, when TensorRT runs here;
    the user's file unchecked when it does not; else none."""
    from NNDF.backends.trt.engine import import_trt, load_engine
    from NNDF.backends.trt.options import TRTOptions
    from NNDF.integrity import engine_signature

    backend = run.bind("trt")
    flags = run.options_of(TRTOptions)
    user = backend.user_engines(run)
    usable, why = backend.availability({TRTOptions: flags})
    if usable:
        trt = import_trt(flags.trt_module)
        path = (user or backend.engine_paths(run, trt))["encoder"]
        return Engine(path, engine_signature(trt, load_engine(trt, path.read_bytes(), str(path))),
                      "--encoder-engine" if user else "built or found current by the trt backend")
    if user:
        return Engine(user["encoder"], None, f"--encoder-engine, copied unchecked (TensorRT cannot run here: {why})")
    return Engine(None, None, why)


def trtexec_command(run, names: Names) -> str:
    """How to build N_model/1/model.plan in the serving container (its TensorRT must be the server's)."""
    from Encoder.trt import encoder_shapes
    from NNDF.backends.trt.options import TRTOptions

    shapes = encoder_shapes(run.options, run.options_of(TRTOptions), run.family.task.max_length(run))
    inputs = run.family.task.input_names(run)

    def shape(pick) -> str:
        return ",".join(f"{n}:{pick(shapes.batch)}x{pick(shapes.seq)}" for n in inputs)

    return (f"trtexec --onnx={names.model_python}/1/{PYTHON_ONNX} --saveEngine={names.model}/1/model.plan "
            f"--minShapes={shape(lambda r: r.min)} --optShapes={shape(lambda r: r.opt)} "
            f"--maxShapes={shape(lambda r: r.max)}" + (" --fp16" if run.options.fp16 else ""))


# --- writing ---------------------------------------------------------------------------------------------------

def _configs(run, names: Names, batching: Batching, backend: str, signature) -> dict:
    """The five configs, each saying what it serves (the `triton` backend checks it)."""
    from NNDF.backends.triton.names import serves
    from NNDF.triton.config import add_parameters

    task = run.family.task
    pad = run.tokenizer.pad_token_id
    configs = {names.tokenize: tokenize_config(names, signature, batching, task.max_length(run)),
            names.model: model_config(names, signature, batching, backend),
            names.model_python: model_python_config(names, signature, batching, 0 if pad is None else pad,
                                                    run.source.dims.vocab, run.options.threads),
            names.ensemble: ensemble_config(names.ensemble, names.tokenize, names.model, signature, batching),
            names.ensemble_python: ensemble_config(names.ensemble_python, names.tokenize, names.model_python,
                                                   signature, batching)}
    for config in configs.values():
        add_parameters(config, serves(run))
    return configs


def _fill(run, names: Names, name: str, version: Path, graph: Path, engine: Engine | None, backend: str):
    """The version folder's files of model `name`; the model file its config serves, with its signature."""
    from NNDF.integrity import onnx_signature
    from NNDF.triton.repository import write_stub

    version.mkdir(parents=True)  # ensembles too: Triton wants a version folder for every model
    if name == names.tokenize:
        run.tokenizer.save_pretrained(str(version / "tokenizer"))
        write_stub(version, "Encoder.triton.serving:TokenizeModel")
    elif name == names.model_python:
        write_stub(version, "Encoder.triton.serving:OnnxEncoderModel")
        path = _copy_graph(graph, version, PYTHON_ONNX)
        return path, onnx_signature(path)
    elif name == names.model and backend == "onnxrt":
        path = _copy_graph(graph, version, "model.onnx")
        return path, onnx_signature(path)
    elif name == names.model and engine.path is not None:
        path = version / "model.plan"
        shutil.copy2(engine.path, path)
        return path, engine.signature
    elif name == names.model:
        version.rmdir()  # no engine: the config alone (README.md says how to build the plan)
    return None, None


def _write(run, repository: Path, names: Names, batching: Batching, backend: str, graph: Path, signature,
           engine: Engine | None, force: bool, report: Report, query: str) -> None:
    from NNDF.triton import config as tc
    from NNDF.triton.repository import VERSION, staged_model

    configs = _configs(run, names, batching, backend, signature)
    with ExitStack() as stack:  # every model staged first: an error leaves the repository as it was
        stages = {name: stack.enter_context(staged_model(repository, name, force)) for name in configs}
        for name, config in configs.items():
            stage = stages[name]
            path, file_signature = _fill(run, names, name, stage / VERSION, graph, engine, backend)
            written = tc.write_config(stage, config)
            tc.read_config(written)  # Triton's schema, strictly
            if file_signature is not None:
                check_config_file(written, path, file_signature)
            _write_readmes(run, names, name, stage, backend, batching, repository, engine, query)
            files = sum(1 for p in stage.rglob("*") if p.is_file())
            runs_on = config.platform or config.backend
            report.results.append(DeployedEncoder(name, runs_on, ", ".join(i.name for i in config.input),
                                                  ", ".join(o.name for o in config.output), files))


def _write_readmes(run, names: Names, name: str, stage: Path, backend: str, batching: Batching,
                   repository: Path, engine: Engine | None, query: str) -> None:
    """The deployment's README in the ensemble's folder; TensorRT's engine README in N_model's."""
    from Encoder.triton.readme import deployment_readme, plan_readme, write_text

    if name == names.ensemble:
        write_text(stage / "README.md", deployment_readme(run, names, backend, batching, repository, query))
    elif name == names.model and engine is not None:
        have = (f"`1/model.plan` is the engine ({engine.why})." if engine.path is not None else
                f"`1/model.plan` is not here: no TensorRT engine could be had where this was written ({engine.why}).")
        write_text(stage / "README.md", plan_readme(names.model, have, trtexec_command(run, names)))


def _query(run, names: Names, chosen) -> str:
    """The command that queries the served model beside the same graph in process (`chosen`: the deployed backend,
    whose quantization's flags it repeats, with the run's model source, working dir, device and precision)."""
    from NNDF.backends.onnxrt.options import ORTOptions
    from NNDF.triton.repository import SAME_ARTIFACTS, command

    same = chosen.variant_flags() if chosen.name == "onnxrt" else ()
    source = run.options.as_flags(*SAME_ARTIFACTS, "task") + run.options_of(ORTOptions).as_flags("ort_optimize")
    return command("predict", run.family.name, "onnxrt", "triton", *same, "--triton-model", names.model_python,
                   *source)


def _notes(report: Report, run, repository: Path, names: Names, chosen, engine: Engine | None, query: str) -> None:
    """What the deployment needs and how to query it (`query`: the command, without its --prompt)."""
    backend = chosen.name
    platform = "onnxruntime_onnx" if backend == "onnxrt" else "tensorrt_plan"
    report.notes.append(f"{names.model} ({platform}) and the ensemble {names.ensemble} need Triton's "
                        f"{'ONNX Runtime' if backend == 'onnxrt' else 'TensorRT'} backend: NVIDIA's container "
                        "serves them; the nvidia-pytriton wheel (run.py serve here) has only the python backend, "
                        f"so here {names.ensemble_python} (text) and {names.model_python} (token ids) are served")
    if engine is not None and engine.path is None:
        report.notes.append(f"no TensorRT engine here ({engine.why}): {names.model}/1/model.plan is missing; build "
                            f"it in the serving container: {trtexec_command(run, names)}")
    elif engine is not None and engine.signature is None:
        report.notes.append(f"{names.model}/1/model.plan: {engine.why}")
    from NNDF.triton.repository import command

    report.notes.append(f"serve: {command('serve', str(repository))}; query: {query} --prompt TEXT (or any Triton "
                        f"client: {names.ensemble_python} takes text BYTES [batch, 1])")
