"""Typed errors. Anything derived from `HarnessError` is reported by the CLI as one line, exit code 2.

Messages say what was wrong and, where there is a choice, list the valid choices. `assert` is reserved for
internal invariants; user-facing problems raise one of these, chained (`raise ... from exc`) to the library error
behind them when there is one, so `--verbose` can show its traceback. Warnings (a cached artifact rebuilt, ...)
go through `logging` (`logging.getLogger(__name__).warning`): the CLI prints each as one `warning: ...` line.
Messages and printed commands name the program as the user ran it (`PROG`).
"""
from __future__ import annotations

import sys
from pathlib import Path

PROG = "hf-harness" if Path(sys.argv[0]).name == "hf-harness" else "run.py"  # the command as the user typed it


class HarnessError(Exception):
    """A problem the user can fix: bad input, missing dependency, unreachable hub, ..."""

    exit_code = 2


class UsageError(HarnessError):
    """A flag value or combination that cannot work."""


class UnknownChoice(UsageError):
    def __init__(self, what: str, value: object, choices):
        choices = ", ".join(str(c) for c in choices)
        super().__init__(f"unknown {what} {value!r}; valid choices: {choices}")


class ModelLoadError(HarnessError):
    """A model, config or tokenizer could not be loaded (missing folder, wrong architecture, no hub)."""


class WrongModelType(ModelLoadError):
    """A model of an architecture the family does not run; `model_type` is its HF config's."""

    def __init__(self, message: str, model_type: str):
        super().__init__(message)
        self.model_type = model_type


class BackendUnavailable(HarnessError):
    """A backend's library or device is missing on this machine."""


class ArtifactError(HarnessError):
    """An ONNX file or engine given by the user is unreadable or does not fit the model."""


class InferenceError(HarnessError):
    """A backend failed while running a model (the library's own message is chained)."""


class DiskFull(HarnessError):
    """No space left (or the quota exhausted) where an artifact or a model repository is written."""


class DatasetError(HarnessError):
    """A dataset file or name that cannot be read."""

