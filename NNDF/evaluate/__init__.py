"""Evaluators: what an action asks a kind of model for. The action's skeleton (NNDF/actions/skeleton.py) opens the
run, makes the report, sets each backend row up and frees it, and cleans up; the evaluator says what differs:

    check(task)                         before anything loads (input files, flag values): refuse in one line
    run_options() -> tuple              option groups the run opens with besides the backends' own
    begin(run, report)                  the run is open: the report's settings, checks needing the model, rows
                                        that are not backends (an HF baseline)
    evaluate(run, name, backend, steps, report) -> outcome     one backend row, its steps set up
    end(run, report, outcomes)          results from [(name, outcome)], agreement between rows, notes

A kind answers `task.evaluator(action_name)` with the "module:Class" of an `Evaluator` (`NNDF.registry.evaluator`
loads it), or None when it has none (its task's `evaluators` table). The generative kinds (decoder-only,
encoder-decoder, image-to-text) share theirs, in this package, over the shared generation loop; the encoder
kind's are in Encoder/evaluate/.
"""
from __future__ import annotations

from NNDF.options import ModelOptions
from NNDF.session import note_export_check, torch_threads
from NNDF.timing import INTERLEAVE_IDLE, INTERLEAVE_WARM, paired_ratio


class Evaluator:
    """One action's work for one kind of model (see the module docstring for the order of the calls)."""

    together: bool = False  # every row's steps stay set up at once, `end` running while they are (set per run too)

    def __init__(self, action: str, options: ModelOptions, *groups) -> None:
        self.action, self.options, self.groups = action, options, groups

    def check(self, task) -> None:
        """Refuse what is wrong before anything loads."""

    def run_options(self) -> tuple:
        return ()

    def begin(self, run, report) -> None:
        """The run is open and the report made (its settings are set here)."""

    def evaluate(self, run, name: str, backend, steps, report):
        raise NotImplementedError

    def export_notes(self, report, name: str, backend) -> None:
        """How far the row's exported graph was from PyTorch, and its own notes (after `evaluate`)."""
        note_export_check(report, name, backend)

    def end(self, run, report, outcomes: list) -> None:
        """[(row name, what `evaluate` returned)] in row order."""


def interleaved_call(run, backend, call):
    """`call` run with `backend`'s torch threads (`NNDF.session.torch_threads`): rows set up at once and timed in
    turns (`benchmark --interleave`) each keep their own setting."""
    def wrapped():
        with torch_threads(run, backend):
            return call()

    return wrapped


def interleave_note(baseline: str | None) -> str:
    """What `benchmark --interleave` did, for the report (`baseline`: the row timed before the others, if any)."""
    alone = f"; {baseline} was timed before them, on its own" if baseline else ""
    return ("interleaved: every backend row set up at once and timed in turns (each iteration runs every row once, "
            f"each turn after {INTERLEAVE_IDLE:g} s idle and {INTERLEAVE_WARM:g} s of untimed calls){alone}")


def paired_note(rows: list[tuple[str, list[float]]], rate: str) -> str | None:
    """Each row's `rate` over the first row's from interleaved samples [(name, times)], paired round by round
    (`NNDF.timing.paired_ratio`); None for one row."""
    if len(rows) < 2:
        return None
    (first, times), *others = rows
    ratios = ", ".join(f"{name} {mid:.2f}x [{low:.2f}-{high:.2f}]"
                       for name, row in others for low, mid, high in (paired_ratio(times, row),))
    return f"interleaved: {rate} over {first}'s, paired round by round, median [quartiles]: {ratios}"
