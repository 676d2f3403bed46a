"""The README files an encoder deployment writes: `N/README.md` (the ensemble's folder: the five models, how to
serve them in NVIDIA's container and here, how to query them) and, for TensorRT, `N_model/README.md` (where the
engine came from, or the trtexec command that builds it in the serving container). The repository's own
README (NNDF/triton/repository.py) lists every model and points to these."""
from __future__ import annotations

import shlex
from pathlib import Path

from Encoder.triton.configs import PLATFORMS, PYTHON_ONNX, Batching, Names
from NNDF.triton.server import PATH_VARIABLE, ROOT

DEPLOYMENT = """# {base}: {family} {variant} ({task}), transformer-deploy's layout

| model | runs on | takes | returns |
|---|---|---|---|
| `{n.tokenize}` | python (the run's tokenizer, `1/tokenizer/`) | `text` BYTES [1] | {ids} INT64 [-1] |
| `{n.model}` | {platform} (`1/{filename}`) | {ids} | `{output}` |
| `{n.model_python}` | python (`1/{onnx}` on ONNX Runtime, the project's onnxrt steps) | {ids} | `{output}` |
| `{n.ensemble}` | ensemble: `{n.tokenize}` -> `{n.model}` | `text` | `{output}` |
| `{n.ensemble_python}` | ensemble: `{n.tokenize}` -> `{n.model_python}` | `text` | `{output}` |

Texts are UTF-8, one per row (`[batch, 1]`), truncated to {max_length} tokens and right padded within a
request; an empty or non-UTF-8 text, ids outside the vocabulary or inputs of different shapes get an error
response (HTTP 400) and the model keeps serving. Batching: at most {batch} rows per request and per batch;
dynamic batching{preferred} with up to {delay} us of queueing. `{n.model_python}` accepts ragged batches (it
pads requests of different lengths into one forward: padding changes no row's numbers); `{n.model}` batches
requests of equal length only (Triton's ONNX Runtime / TensorRT backends take ragged inputs only as 1-D).

## Serve all five in NVIDIA's container

    docker run --rm --gpus all -p8000:8000 -p8001:8001 -p8002:8002 -v {repository}:/models \\
        -v {root_arg}:/project -e {variable}=/project nvcr.io/nvidia/tritonserver:<yy.mm>-py3 \\
        bash -c "pip install -r /project/requirements.txt && tritonserver --model-repository=/models"

`{n.model}` needs Triton's {backend_name} backend, which NVIDIA's container has and the nvidia-pytriton wheel
does not. The python models import this project (`{variable}`) with torch, transformers and onnxruntime.{trt}
Not verified here (no container on this machine): the container's python backend and numpy version.

## Serve it with this project (CPU, loopback)

    python run.py serve {repository}

The pytriton wheel's server has only the python backend: it serves `{n.tokenize}`, `{n.model_python}` and
`{n.ensemble_python}`, and says it leaves `{n.model}` and `{n.ensemble}` out.

## Query it

    curl -s localhost:8000/v2/models/{n.ensemble_python}/infer -d \\
        '{{"inputs": [{{"name": "text", "shape": [2, 1], "datatype": "BYTES", "data": ["first text", "second"]}}]}}'
    {query} --prompt "first text"

(`{n.ensemble}` and `{n.model}` in NVIDIA's container: the same requests.) `predict` / `benchmark ... triton`
send the token ids the project makes in process, so served and in-process results sit side by side.
"""

TRT_BUILD = """
`{model}/1/model.plan` must be built by the container's TensorRT (an engine runs only with the TensorRT that built
it, on its GPU): see `{model}/README.md`."""

PLAN = """# {model}: a TensorRT engine for Triton's TensorRT backend

{have}

An engine runs only with the TensorRT version that built it, on the GPU it was built for: build it inside the
serving container, from the repository folder, with

    {command}
"""


def deployment_readme(run, names: Names, backend: str, batching: Batching, repository: Path, query: str) -> str:
    platform, filename = PLATFORMS[backend]
    task = run.family.task
    ids = ", ".join(f"`{n}`" for n in task.input_names(run))
    preferred = f" (preferred batch sizes {', '.join(map(str, batching.preferred))})" if batching.preferred else ""
    return DEPLOYMENT.format(
        base=names.base, n=names, family=run.family.name, variant=run.source.variant,
        task=task.head(run.source, run.options).name, ids=ids, output=task.head(run.source, run.options).output,
        platform=platform, filename=filename, onnx=PYTHON_ONNX, max_length=task.max_length(run),
        batch=batching.max_batch_size, preferred=preferred, delay=batching.delay_us,
        repository=shlex.quote(str(repository.resolve())), root_arg=shlex.quote(str(ROOT)), variable=PATH_VARIABLE,
        backend_name="ONNX Runtime" if backend == "onnxrt" else "TensorRT",
        trt=TRT_BUILD.format(model=names.model) if backend == "trt" else "", query=query)


def plan_readme(model: str, have: str, command: str) -> str:
    return PLAN.format(model=model, have=have, command=command)


def write_text(path: Path, text: str) -> None:
    from NNDF.artifacts import file_mode

    path.write_text(text)
    path.chmod(file_mode())
