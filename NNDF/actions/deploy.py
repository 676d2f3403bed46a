"""`deploy MODEL BACKEND --repository DIR`: write a Triton Inference Server model repository for the model.

Generative kinds: a python-backend model running the project's generation loop over the onnxrt backend's graphs
(NNDF/triton/generative_deploy.py). A kind may deploy its own way (its task's `actions` table names its own
`deploy`, as encoder models do). TensorRT is refused: the engine-building path cannot run on this CPU machine and
TensorRT execution inside the server is unverified, so no repository is written for it.
"""
from __future__ import annotations

from NNDF.errors import UsageError
from NNDF.options import ModelOptions, OptionGroup
from NNDF.triton.options import DeployOptions

DEPLOYABLE = {"onnxrt": "NNDF.triton.generative_deploy:deploy_generative"}
REFUSED = {"trt": "a python model over TensorRT engines is not written: TensorRT execution inside Triton is "
                  "unverified here (no GPU); deploy onnxrt, or serve engines with NVIDIA's container",
           "frameworks": "the PyTorch weights are not deployed (the served model runs exported graphs): deploy "
                         "onnxrt"}


def deploy(family: str, backends: tuple[str, ...], options: ModelOptions, deploy_options: DeployOptions,
           *backend_options: OptionGroup):
    from NNDF import registry

    deploy_options.required_repository()
    if len(backends) != 1:
        raise UsageError(f"deploy writes one backend's model: name one of {', '.join(DEPLOYABLE)}")
    name = backends[0]
    if name in REFUSED:
        raise UsageError(f"deploy {family} {name}: {REFUSED[name]}")
    if name not in DEPLOYABLE:
        raise UsageError(f"deploy {family} {name}: cannot deploy the {name} backend; deployable: "
                         f"{', '.join(DEPLOYABLE)}")
    return registry.load(DEPLOYABLE[name])(family, options, deploy_options, *backend_options)
