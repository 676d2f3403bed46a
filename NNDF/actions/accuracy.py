"""`accuracy`: scores against a dataset (generative kinds: LAMBADA by teacher forcing, NNDF/evaluate/accuracy.py;
encoders: labelled texts and agreement with PyTorch, Encoder/evaluate/accuracy.py)."""
from __future__ import annotations

from NNDF.actions.skeleton import run_action
from NNDF.options import AccuracyOptions, ModelOptions, OptionGroup
from NNDF.results import Report


def accuracy(family: str, backends: tuple[str, ...], options: ModelOptions, acc: AccuracyOptions,
             *backend_options: OptionGroup) -> Report:
    return run_action("accuracy", family, backends, options, (acc,), backend_options)
