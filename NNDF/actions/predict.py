"""`predict`: embeddings or class labels of texts, every chosen backend side by side (the encoder kind's
evaluator: Encoder/evaluate/predict.py)."""
from __future__ import annotations

from NNDF.actions.skeleton import run_action
from NNDF.options import ModelOptions, OptionGroup, PredictOptions
from NNDF.results import Report


def predict(family: str, backends: tuple[str, ...], options: ModelOptions, predict_opts: PredictOptions,
            *backend_options: OptionGroup) -> Report:
    return run_action("predict", family, backends, options, (predict_opts,), backend_options)
