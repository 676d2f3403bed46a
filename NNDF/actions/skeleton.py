"""The one action skeleton: every action that runs models over backends is this function plus the kind's
evaluator (NNDF/evaluate/__init__.py says what an evaluator answers).

open the run -> the report -> per backend row (onnxrt: one per --quantize value): its steps set up, evaluated,
its export noted, freed (one backend in memory at a time, unless the evaluator keeps them all open) -> the
evaluator's results and agreement between rows -> cleanup (the weights dropped, --cleanup's artifacts removed).
"""
from __future__ import annotations

import sys
from contextlib import ExitStack

from NNDF import registry
from NNDF.errors import UsageError
from NNDF.options import ModelOptions, OptionGroup
from NNDF.results import Report, environment
from NNDF.actions.common import backend_rows, backend_steps, open_run
from NNDF.session import finish


def evaluator_of(action: str, task):
    """The evaluator class that runs `action` for this kind (None: none does): the kind's own, else one the
    action's declaration supplies for that kind (`Action.evaluators`)."""
    from NNDF.actions import ACTIONS

    own = registry.evaluator(task, action)
    if own is not None:
        return own
    supplied = ACTIONS[action].evaluators if action in ACTIONS else ()
    found = next((evaluator for kind, evaluator in supplied if isinstance(task, kind)), None)
    return registry.load(found) if isinstance(found, str) else found


def evaluator_for(action: str, family) -> type:
    """`evaluator_of`, or the one generated line (UsageError) saying the kind has none and what to use instead."""
    from NNDF.actions import ACTIONS

    found = evaluator_of(action, family.task)
    if found is None:
        raise UsageError(ACTIONS[action].unavailable(family))
    return found


def check_evaluated(action: str, family) -> None:
    """Refuse in one line (`evaluator_for`) a family whose kind has no evaluator for `action`, when the action is
    one that kinds evaluate (some family's kind has an evaluator for it, or the action supplies one); an action
    that runs without evaluators (`list`, or a plain library function) is not refused here."""
    from NNDF.actions import ACTIONS

    kinds = [fam.task for fam in registry.families().values()]
    if ACTIONS[action].evaluators or any(action in task.evaluators for task in kinds):  # tables: nothing imported
        evaluator_for(action, family)


def run_action(action: str, family: str, backends: tuple[str, ...], options: ModelOptions, groups: tuple,
               backend_options: tuple[OptionGroup, ...]) -> Report:
    """`action` over the named backends; `groups`: the action's option groups after ModelOptions, in order."""
    fam = registry.family(family)
    evaluator = evaluator_for(action, fam)(action, options, *groups)
    evaluator.check(fam.task)  # bad input fails before anything loads
    run = open_run(family, options, backends, *evaluator.run_options(), *backend_options)
    report = Report(action, run.family.name, run.source.variant, {}, environment=environment(run.device))
    evaluator.begin(run, report)
    rows = backend_rows(run, backends)
    if evaluator.together:
        with ExitStack() as stack:
            opened = []
            for name, row in rows:
                if sys.stderr.isatty():
                    print(f"Setting up environment for {name}", file=sys.stderr)
                backend, steps = stack.enter_context(backend_steps(run, row, threads=False))
                evaluator.export_notes(report, name, backend)
                opened.append((name, evaluator.evaluate(run, name, backend, steps, report)))
            evaluator.end(run, report, opened)
    else:
        outcomes = []
        for name, row in rows:
            with backend_steps(run, row) as (backend, steps):
                outcome = evaluator.evaluate(run, name, backend, steps, report)
                evaluator.export_notes(report, name, backend)
            outcomes.append((name, outcome))
        evaluator.end(run, report, outcomes)
    finish(run)
    return report
