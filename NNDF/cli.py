"""Command line: `python run.py <action> <MODEL> [backend ...] [flags]`, a thin adapter over the actions.

Each action's parser is built from its declaration (`NNDF.actions.ACTIONS`: option groups) plus the option
groups the registered backends own; the action is one library call that returns a `Report`, printed as a table
and optionally written as JSON. Every `HarnessError` (and argparse's own errors) becomes one line on stderr and
exit code 2 (with --verbose, the traceback of what caused it follows); library warnings are silenced unless
--verbose, the harness's own warnings are one `warning: ...` line each.
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


class _Parser(argparse.ArgumentParser):
    """argparse, but errors are one line and exit code 2."""

    def error(self, message):
        print(f"error: {self.prog}: {message}", file=sys.stderr)
        raise SystemExit(2)


def _add_action(sub, action: Action, backend_groups: list[type]) -> None:
    p = sub.add_parser(action.name, help=action.help, description=action.help)
    families = ", ".join(registry.FAMILY_PACKAGES)
    if not action.runs_models:
        p.add_argument("model", nargs="?", metavar="MODEL", help=f"one of {families}")
        p.add_argument("--json", help="also write the listing as JSON to this path")
        return
    p.add_argument("model", metavar="MODEL", help=f"model family: {families}")
    p.add_argument("backends", nargs="*", metavar="BACKEND", help=f"any of {', '.join(registry.BACKENDS)}")
    if action.side_by_side:
        p.add_argument("--compare", nargs="+", metavar="BACKEND", help="backends to run side by side "
                       "(default: every backend usable here)")
    for group in (*action.groups, *backend_groups):
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
    function = registry.load(action.function)
    if not action.runs_models:
        return function(args.model)
    backends = _backends(args, action)
    groups = [group.from_namespace(args) for group in action.groups]
    owned = _backend_options(args)
    for name in backends:  # a backend-owned flag may replace the action (TensorRT's --build-only)
        report = registry.backend_class(name).run_instead(args.model, backends, {**owned, ModelOptions: groups[0]})
        if report is not None:
            return report
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
    except HarnessError as exc:
        if verbose and exc.__cause__ is not None:  # e.g. the exporter's own traceback behind a one-line error
            traceback.print_exception(exc.__cause__, file=sys.stderr)
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    report.print()
    report.write_json(getattr(args, "json", None))
    return 0
