"""Writing Triton model repositories: one model folder at a time, staged and renamed into place.

A repository is a folder whose entries are model folders (`<name>/config.pbtxt`, `<name>/<version>/...`) plus
this project's `README.md`. `deploy` adds one model: the model folder is built in a temporary folder beside the
repository and renamed into it, so an interrupted deploy leaves nothing a server would load. A folder that is not
a repository is refused, and so is an existing model of the same name unless `--force` (which replaces it).
Python-backend models get a `model.py` stub that imports a class of this project (`module:Class`); the stub puts
the folders in `NNDF_TRITON_PATH` (set by `run.py serve`) and the project root recorded at deploy time first on
`sys.path`, because the backend's embedded Python ignores PYTHONPATH.
"""
from __future__ import annotations

import shlex
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from NNDF.artifacts import file_mode, staging_folder
from NNDF.errors import PROG, UsageError
from NNDF.triton.config import CONFIG, read_config
from NNDF.backends.triton.names import check_model_name, default_model_name, model_name  # noqa: F401 (deploy's names)
from NNDF.triton.server import PATH_VARIABLE, ROOT

README = "README.md"
VERSION = "1"
# ModelOptions fields that say which model, artifacts, device and precision a run uses: a printed query command
# repeats them, so that its in-process row finds the graphs the deployment was made from
SAME_ARTIFACTS = ("variant", "torch_dir", "working_dir", "trust_remote_code", "device", "cpu", "fp16")


def command(*args: str) -> str:
    """A `python run.py ...` command line as it is printed (`hf-harness ...` where the user ran that): every
    argument quoted for the shell (paths with spaces or other special characters)."""
    return shlex.join((*(("python", "run.py") if PROG == "run.py" else (PROG,)), *args))


def models(repository: Path) -> list[str]:
    """The model folders of a repository (those with a config.pbtxt), sorted."""
    return sorted(p.name for p in repository.iterdir() if p.is_dir() and (p / CONFIG).is_file())


def repository_problem(repository: Path) -> str | None:
    """Why `repository` cannot take a model (None: it can; a missing folder is created)."""
    if not repository.exists():
        return None
    if not repository.is_dir():
        return "is a file, not a folder"
    strangers = [p.name for p in repository.iterdir()
                 if not p.name.startswith(".") and p.name != README and not (p.is_dir() and (p / CONFIG).is_file())]
    if strangers:
        return (f"is not a Triton model repository (it holds {', '.join(sorted(strangers)[:3])}, which are not "
                "model folders)")
    return None


def check_target(repository: Path, name: str, force: bool) -> None:
    """UsageError when `repository` cannot take model `name` (not a repository; the model exists, no --force)."""
    problem = repository_problem(repository)
    if problem:
        raise UsageError(f"--repository {repository}: {problem}; give an empty or new folder, or an existing "
                         "repository")
    if (repository / name).exists() and not force:
        raise UsageError(f"--repository {repository} already has a model {name!r}: add --force to replace it, or "
                         "give another --model-name")


@contextmanager
def staged_model(repository: Path, name: str, force: bool) -> Iterator[Path]:
    """Yield a temporary model folder; on success it becomes `<repository>/<name>` (replacing it with `force`),
    and the repository README is rewritten. On failure nothing in the repository changes."""
    check_target(repository, name, force)
    target = repository / name
    repository.mkdir(parents=True, exist_ok=True)
    with staging_folder(repository.parent, f".{name}.", ".staging") as staging:  # a killed deploy's: removed
        yield staging
        if target.exists():
            with staging_folder(repository.parent, f".{name}.", ".old") as old:
                target.rename(old / name)
                staging.rename(target)
        else:
            staging.rename(target)
    write_readme(repository)


STUB = '''"""Triton python-backend entry point written by `python run.py deploy` (NNDF/triton/repository.py).

The class it serves is {target} of the project at PROJECT. The backend's embedded Python ignores PYTHONPATH,
so the folders in ${variable} (set by `python run.py serve`: numpy 1.x for this stub, the server's PYTHONPATH,
the venv's packages, the project) and PROJECT go first on sys.path before the project is imported.
"""
import importlib
import os
import site
import sys

PROJECT = {root!r}


def _paths():
    wanted = [p for p in os.environ.get({variable!r}, "").split(os.pathsep) if p] + [PROJECT]
    before = list(sys.path)
    for path in wanted:
        site.addsitedir(path)  # also runs the folder's .pth files
    added = [p for p in sys.path if p not in before]
    sys.path[:] = added + [p for p in before if p not in added]


_paths()
_module, _, _name = {target!r}.partition(":")
TritonPythonModel = getattr(importlib.import_module(_module), _name)
'''


def deployed_variant(run, backend: str):
    """The backend whose graphs a deployment serves: `backend` as the run binds it, or for onnxrt its one
    `--quantize` variant (the float graphs, or their int8 / int4 quantization); several values are refused, one
    graph set per deployment."""
    variants = run.bind(backend).variants(run)
    if len(variants) != 1:
        raise UsageError(f"deploy writes one graph: give one --quantize value (got "
                         f"{', '.join(v.label for v in variants)}), and deploy each under its own --model-name")
    return variants[0]


def copy_graph(source: Path, folder: Path) -> Path:
    """Copy an ONNX graph, the external data files it names and the library of this project's ops beside it (a
    graph that uses them carries it: NNDF.backends.onnxrt.custom_ops) into `folder`; the copied graph's path."""
    import onnx

    from NNDF.backends.onnxrt import custom_ops

    folder.mkdir(parents=True, exist_ok=True)
    library = source.with_name(custom_ops.FILE)
    if library.is_file():
        shutil.copy2(library, folder / library.name)
    model = onnx.load(str(source), load_external_data=False)
    locations = {entry.value for tensor in model.graph.initializer for entry in tensor.external_data
                 if entry.key == "location"}
    for location in sorted(locations):
        (folder / location).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source.parent / location, folder / location)
    shutil.copy2(source, folder / source.name)
    return folder / source.name


def write_stub(version_dir: Path, target: str) -> Path:
    """`<version_dir>/model.py`: Triton's `TritonPythonModel` is the project's class `target` ("module:Class")."""
    path = version_dir / "model.py"
    path.write_text(STUB.format(target=target, root=str(ROOT), variable=PATH_VARIABLE))
    path.chmod(file_mode())
    return path


def _describe(repository: Path, name: str) -> str:
    config = read_config(repository / name / CONFIG)
    runs = config.platform or config.backend
    inputs = ", ".join(i.name for i in config.input)
    outputs = ", ".join(o.name for o in config.output)
    return f"| `{name}` | {runs} | {config.max_batch_size} | {inputs} | {outputs} |"


README_TEXT = """# Triton model repository

Written by `python run.py deploy` of the project at `{root}`. Models:

| model | runs on | max batch | inputs | outputs |
|---|---|---|---|---|
{rows}

## Serve it with this project (CPU, loopback)

    python run.py serve {repository} --http-port 8000 --grpc-port 8001 --metrics-port 8002

`serve` runs the `tritonserver` on PATH, else the one bundled in the nvidia-pytriton wheel, and sets
`{variable}` so the python-backend models import this project and its venv. The bundled python backend's stub
was built against numpy 1.x and corrupts tensors under numpy 2, so the stub runs with numpy 1.26 from
`.venv/triton-stub` (the Makefile's venv recipe installs it; `serve` says the command when it is missing).

## Serve it with NVIDIA's container

    docker run --rm -p8000:8000 -p8001:8001 -p8002:8002 -v {repository}:/models -v {root_arg}:/project \\
        -e {variable}=/project nvcr.io/nvidia/tritonserver:<yy.mm>-py3 \\
        bash -c "pip install -r /project/requirements.txt && tritonserver --model-repository=/models"

`python` models run the project's code inside the server (its requirements must be installed in the
container, as above). `onnxruntime_onnx` and `tensorrt_plan` models need Triton's ONNX Runtime / TensorRT
backends, which NVIDIA's container has and the nvidia-pytriton wheel does not: serve those there.

## Query it

The generative models answer `chat`, `run`, `compare` and `benchmark` through the `triton` client backend, next
to the in-process backends (add the deploy's model flags, e.g. `--use-cache`):

    python run.py chat FAMILY onnxrt triton --triton-url http://127.0.0.1:8000 --triton-model NAME --prompt "Hello"

or any Triton client (tritonclient.http / tritonclient.grpc, perf_analyzer) with the inputs above. A model
deployed with `--streaming` (decoupled mode) answers over gRPC streams only, one response per token.
"""


def write_readme(repository: Path) -> None:
    rows = "\n".join(_describe(repository, name) for name in models(repository))
    notes = [name for name in models(repository) if (repository / name / README).is_file()]
    if notes:  # a deployment's own notes (an encoder's: its five models, NVIDIA's container, queries)
        rows += "\n\nMore in " + ", ".join(f"`{name}/{README}`" for name in notes) + "."
    text = README_TEXT.format(root=ROOT, root_arg=shlex.quote(str(ROOT)), rows=rows, variable=PATH_VARIABLE,
                              repository=shlex.quote(str(repository.resolve())))
    tmp = repository / f".{README}.tmp"
    tmp.write_text(text)
    tmp.chmod(file_mode())
    tmp.replace(repository / README)
