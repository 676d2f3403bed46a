"""Command line: `python run.py <action> <MODEL> [backend ...] [flags]`, a thin adapter over the actions.

Each action's parser is built from its declaration (`NNDF.actions.ACTIONS`: option groups) plus the option
groups the registered backends own; the action is one library call that returns a `Report`, printed as a table
and optionally written as JSON. Every `HarnessError` (and argparse's own errors) becomes one line on stderr and
exit code 2 (with --verbose, the traceback of what caused it follows); library warnings are silenced unless
--verbose, the harness's own warnings are one `warning: ...` line each.

Flags are matched exactly (no abbreviations: `--iter` is not `--iterations`). A flag of the action's option
groups that the action does not read (`Action.ignores`), or a backend's own flag without that backend, is
refused in one line saying where it applies. `--json` is checked before the action runs (a folder, or a place
that cannot be written, fails at once rather than after the run).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
import warnings

from NNDF import progress, registry
from NNDF.actions import ACTIONS, Action
from NNDF.errors import HarnessError, UnknownChoice, UsageError
from NNDF.options import ModelOptions
from NNDF.results import check_output_path, say


class _Parser(argparse.ArgumentParser):
    """argparse, but errors are one line and exit code 2, and flags are never abbreviated."""

    def __init__(self, *args, **kwargs):
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message):
        say(f"error: {self.prog}: {' '.join(message.split())}")
        raise SystemExit(2)


def _add_action(sub, action: Action, backend_groups: list[type]) -> None:
    p = sub.add_parser(action.name, help=action.help, description=action.help, allow_abbrev=False)
    families = ", ".join(registry.FAMILY_PACKAGES)
    if not action.runs_models:
        if action.operand:
            p.add_argument("model", metavar=action.operand[0], help=action.operand[1])
        else:
            p.add_argument("model", nargs="?", metavar="MODEL", help=f"one of {families}")
        p.add_argument("--json", help="also write the report as JSON to this path")
        for group in action.groups:
            group.add_to_parser(p)
        return
    p.add_argument("model", metavar="MODEL", help=f"model family: {families}")
    p.add_argument("backends", nargs="*", metavar="BACKEND", help=f"any of {', '.join(registry.BACKENDS)}")
    if action.side_by_side:
        p.add_argument("--compare", nargs="+", metavar="BACKEND", help="backends to run side by side "
                       "(default: every backend usable here)")
    for group in action.groups:  # flags the action ignores are parsed (to be refused by name) but not shown
        group.add_to_parser(p, hidden=frozenset(action.ignores))
    for group in backend_groups:
        group.add_to_parser(p)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="run.py", description="HuggingFace models on PyTorch, ONNX Runtime and TensorRT: "
                     "accuracy, speed, chat.")
    sub = parser.add_subparsers(dest="action", required=True, parser_class=_Parser, metavar="ACTION")
    backend_groups = registry.backend_option_groups()
    for action in ACTIONS.values():
        _add_action(sub, action, backend_groups)
    return parser


def _quiet_libraries(verbose: bool) -> None:
    """Our warnings as one `warning: ...` line each; library logs and warnings only with --verbose."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_OneLine())
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, handlers=[handler], force=True)
    if verbose:
        return
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    warnings.filterwarnings("ignore")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" bars: our own bars cover long work
    for name in ("torch", "torch.onnx", "onnxscript", "transformers", "onnx_ir"):
        logging.getLogger(name).setLevel(logging.ERROR)


class _OneLine(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname.lower()}: {record.getMessage()}"


def _refuse_inapplicable(args, action: Action, family) -> None:
    """A flag the action does not read is an error naming the actions it applies to; a flag the family's kind
    of model never reads (`Task.ignores`) names the kind."""
    for group in (*action.groups, *registry.backend_option_groups()):
        for name in group.given(args):
            if name in family.task.ignores:
                raise UsageError(f"{group.flag_name(name)} does not apply to {family.name} "
                                 f"({family.kind} models)")
            if group not in action.groups or action.applies(group, name):
                continue
            where = [a.name for a in ACTIONS.values() if a.applies(group, name)]
            raise UsageError(f"{group.flag_name(name)} does not apply to {action.name} "
                             f"(it applies to {', '.join(where) or 'no action'})")


def _refuse_unowned(args, backends: tuple[str, ...]) -> None:
    """A backend's own flag (TensorRT's --dynamic-batch, ...) given without that backend would be ignored."""
    for backend, entry in registry.BACKENDS.items():
        if backend in backends:
            continue
        for target in entry.options:
            group = registry.load(target)
            given = group.given(args)
            if given:
                raise UsageError(f"{group.flag_name(given[0])} is a flag of the {backend} backend, which this run "
                                 f"does not use ({', '.join(backends)}): name {backend} or drop the flag")


def _check_output(args) -> None:
    """--json: checked before the action runs, so a bad path fails at once and leaves nothing behind."""
    if getattr(args, "json", None) is not None:
        check_output_path(args.json, "--json")


def _backends(args, action: Action) -> tuple[str, ...]:
    chosen = list(args.backends) + list(getattr(args, "compare", None) or [])
    for name in chosen:
        if name not in registry.BACKENDS:
            raise UnknownChoice("backend", name, registry.BACKENDS)
    if not chosen and action.side_by_side:
        fam, options = registry.family(args.model), _backend_options(args)
        chosen = [b for b in registry.backends_of(fam) if registry.backend_class(b).availability(options)[0]]
    if not chosen:
        raise UsageError(f"name at least one backend: {', '.join(registry.BACKENDS)}")
    return tuple(dict.fromkeys(chosen))


def _backend_options(args) -> dict[type, object]:
    return {group: group.from_namespace(args) for group in registry.backend_option_groups()}


def dispatch(args) -> object:
    """Run the parsed command: the action's library function with its option groups."""
    action = ACTIONS[args.action]
    _check_output(args)
    if not action.runs_models:
        return registry.load(action.function)(args.model, *(group.from_namespace(args) for group in action.groups))
    family = registry.family(args.model)
    from NNDF.actions.skeleton import check_evaluated
    check_evaluated(action.name, family)  # a kind without the action's evaluator: one generated line
    _refuse_inapplicable(args, action, family)
    function = registry.load(action.function)
    backends = _backends(args, action)
    groups = [group.from_namespace(args) for group in action.groups]
    owned = _backend_options(args)
    for name, entry in registry.BACKENDS.items():  # a backend-owned flag may replace the action (--build-only),
        if not entry.options:  # also when that backend is not named (it then says what is wrong)
            continue
        report = registry.backend_class(name).run_instead(args.model, backends, {**owned, ModelOptions: groups[0]})
        if report is not None:
            return report
    _refuse_unowned(args, backends)
    return function(args.model, backends, *groups, *owned.values())


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    verbose = getattr(args, "verbose", False)
    _quiet_libraries(verbose)
    if getattr(args, "info", False):
        progress.FORCE = True
    try:
        report = dispatch(args)
        report.print()
        _write_json(report, getattr(args, "json", None))
    except HarnessError as exc:
        if verbose and exc.__cause__ is not None:  # e.g. the exporter's own traceback behind a one-line error
            traceback.print_exception(exc.__cause__, file=sys.stderr)
        say(f"error: {exc}")
        return exc.exit_code
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    except Exception as exc:  # noqa: BLE001 - only out-of-memory is the user's to fix; anything else is a bug
        if not _out_of_memory(exc):
            raise
        if verbose:
            traceback.print_exception(exc, file=sys.stderr)
        first = (str(exc).strip().splitlines() or [exc.__class__.__name__])[0][:160]
        say(f"error: out of memory ({first}): use a smaller --batch-size, shorter lengths or fewer beams")
        return 2
    return 0


def _out_of_memory(exc: BaseException) -> bool:
    """MemoryError, torch's OutOfMemoryError (CUDA), or the CPU allocator's failure (a RuntimeError)."""
    if isinstance(exc, MemoryError) or exc.__class__.__name__ == "OutOfMemoryError":
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text)


def _write_json(report, path: str | None) -> None:
    try:
        report.write_json(path)
    except OSError as exc:  # checked before the run; the place changed since (removed, filled up, ...)
        raise UsageError(f"--json {path}: cannot write it ({exc.strerror or exc}); the results are printed above") \
            from exc
