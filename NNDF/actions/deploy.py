"""`deploy MODEL BACKEND --repository DIR`: write a Triton Inference Server model repository for the model.

The skeleton is the same for every kind: the repository is required, the kind's deploy evaluator picks the one
backend it deploys (or says in one line why not), the run opens as the evaluator asks, the evaluator writes the
repository's models into the report, then cleanup. Generative kinds: a python-backend model running the
project's generation loop over the onnxrt backend's graphs (NNDF/triton/generative_deploy.py); encoder models:
tokenizer + model + ensemble (Encoder/triton/deploy.py).
"""
from __future__ import annotations

from pathlib import Path

from NNDF import registry
from NNDF.artifacts import folder_bytes, space_needed
from NNDF.actions.common import open_run
from NNDF.actions.skeleton import evaluator_for
from NNDF.options import ModelOptions, OptionGroup
from NNDF.results import Report, environment
from NNDF.session import finish
from NNDF.triton.options import DeployOptions


def deploy(family: str, backends: tuple[str, ...], options: ModelOptions, deploy_options: DeployOptions,
           *backend_options: OptionGroup) -> Report:
    fam = registry.family(family)
    evaluator = evaluator_for("deploy", fam)("deploy", options, deploy_options)
    repository = Path(deploy_options.required_repository())
    backend = evaluator.choose(fam.name, backends)
    opened_options, opened, groups = evaluator.opening(fam.name, backend, backend_options)
    run = open_run(family, opened_options, opened, *groups)
    report = Report("deploy", run.family.name, run.source.variant, {}, environment=environment())
    with space_needed(repository, lambda: folder_bytes(run.store.root) + folder_bytes(run.source.local_dir)):
        evaluator.write(run, backend, repository, report)  # a full disk: about the graphs and model files copied
    finish(run)
    return report
