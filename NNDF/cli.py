"""Command line: `python run.py <action> <MODEL> [backend ...] [flags]`, a thin adapter over the actions.

One pass: parse -> resolve the family (its kind) and the backends -> check every flag given against its owner
(NNDF/flags.py: the action reads it, the kind adds it, the backend is named) -> build the action's option groups
-> call the action's library function, which returns a `Report`, printed as a table and optionally written as
JSON. Each action's parser is built from its declaration (`NNDF.actions.ACTIONS`) plus the backends' own groups;
`run.py ACTION MODEL [BACKEND ...] --help` shows only what that model's kind and the backends named read. Every
`HarnessError` (and argparse's own errors) becomes one line on stderr and exit code 2 (with --verbose, the traceback
of what caused it follows); library warnings are silenced unless --verbose, the harness's own warnings are one
`warning: ...` line each. When the reader of stdout goes away (`run.py list | head`) the run ends quietly with exit
code 141, as SIGPIPE ends other tools.

Flags are matched exactly (no abbreviations: `--iter` is not `--iterations`). Output paths (`--json`, `--plot`)
are checked before the action runs: a folder, a place that cannot be written, or one of the run's inputs
(NNDF/outputs.py) fails at once rather than after the run.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import sys
import traceback
import warnings
from functools import partial
from typing import Callable

from NNDF import flags, progress, registry
from NNDF.actions import ACTIONS, Action
from NNDF.errors import PROG, HarnessError, UnknownChoice, UsageError
from NNDF.family import ROOT
from NNDF.outputs import OUTPUTS, STDOUT, check_outputs
from NNDF.plot import plot_format
from NNDF.results import check_output_path, say


class _Parser(argparse.ArgumentParser):
    """argparse, but errors are one line and exit code 2, and flags are never abbreviated."""

    def __init__(self, *args, **kwargs):
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message):
        say(f"error: {self.prog}: {_hinted(' '.join(message.split()))}")
        raise SystemExit(2)


def _hinted(message: str) -> str:
    """A refused word's message, with where to go for a flag other tools of this kind take."""
    if "--build-only" in message:
        message += f" (engines and graphs are built by the build action: {PROG} build MODEL BACKEND...)"
    return message


def _add_action(sub, action: Action, task=None, backends: tuple[str, ...] = ()) -> None:
    """The action's parser: every flag of its groups and the backends' is parsed (to be refused by name when not
    in play); `--help` shows the groups in play for the action, for `task` (the model's kind) and for `backends`
    (those named) when known."""
    p = sub.add_parser(action.name, help=action.help, description=action.help, allow_abbrev=False)
    families = ", ".join(registry.FAMILY_PACKAGES)
    if not action.runs_models:
        if action.operand:
            p.add_argument("model", metavar=action.operand[0], help=action.operand[1])
        else:
            p.add_argument("model", nargs="?", metavar="MODEL", help=f"one of {families}")
        for group in action.owner_groups():
            group.add_to_parser(p)
        return
    p.add_argument("model", metavar="MODEL", help=f"model family: {families}")
    # a default: argparse lists a "*" positional without one as required
    p.add_argument("backends", nargs="*", default=[], metavar="BACKEND", help=f"any of {', '.join(registry.BACKENDS)}")
    if action.side_by_side:
        p.add_argument("--compare", nargs="+", metavar="BACKEND", help="backends to run side by side "
                       "(default: every backend usable here)")
    for group in flags.parsed_groups(action):
        group.add_to_parser(p, shown=flags.shown(action, group, task, backends), hidden=flags.absent_parts(task))


def _named(argv: list[str]):
    """The kind (`Task`) and the backends of `ACTION MODEL [BACKEND ...] --help` when argv names a known family
    there (else None and ())."""
    if not {"-h", "--help"} & set(argv):
        return None, ()
    if len(argv) >= 2 and argv[0] in ACTIONS and ACTIONS[argv[0]].runs_models and argv[1] in registry.FAMILY_PACKAGES:
        named = []
        for word in argv[2:]:
            if word not in registry.BACKENDS:
                break
            named.append(word)
        return registry.family(argv[1]).task, tuple(named)
    return None, ()


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The whole command line; `argv` (when given) narrows the help of `ACTION MODEL` to that model's kind."""
    parser = _Parser(prog=PROG, description="HuggingFace models on PyTorch, ONNX Runtime and TensorRT: "
                     "accuracy, speed, chat, artifacts, serving.")
    sub = parser.add_subparsers(dest="action", required=True, parser_class=_Parser, metavar="ACTION")
    task, backends = _named(argv) if argv else (None, ())
    for action in ACTIONS.values():
        named = task is not None and argv[0] == action.name
        _add_action(sub, action, task if named else None, backends if named else ())
    return parser


def _quiet_libraries(verbose: bool) -> None:
    """Our warnings as one `warning: ...` line each; library logs and warnings only with --verbose."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_OneLine())
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, handlers=[handler], force=True)
    from huggingface_hub.utils import logging as _hub_logging  # noqa: F401 (installs its stderr handler)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_default_handler()  # both libraries' own stderr handlers would print each line again
    hf_logging.enable_propagation()
    logging.getLogger("huggingface_hub").handlers.clear()
    if verbose:
        return
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    warnings.filterwarnings("ignore")
    hf_logging.disable_progress_bar()  # "Loading weights" bars: our own bars cover long work
    for name in ("torch", "torch.onnx", "onnxscript", "transformers", "onnx_ir", "huggingface_hub", "urllib3"):
        logging.getLogger(name).setLevel(logging.ERROR)


class _OneLine(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname.lower()}: {record.getMessage()}"


def _check_outputs(args, family=None) -> None:
    """--json, --plot: checked before the action runs, so a bad path (unwritable, a format not written, one of the
    run's inputs) fails at once and leaves nothing behind."""
    for attribute, flag in OUTPUTS.items():
        if getattr(args, attribute, None) is not None and not (attribute == "json" and args.json == STDOUT):
            check_output_path(getattr(args, attribute), flag)
    if getattr(args, "plot", None) is not None:
        plot_format(args.plot)
    check_outputs(args, _committed_folder(args, family))


def _check_variant(args, family) -> None:
    """--variant naming another family's variant (and no --torch-dir, which it would label): one line naming that
    family, before the hub is asked for it."""
    name = getattr(args, "variant", None)
    if not name or getattr(args, "torch_dir", None) or family.declares(name):
        return
    owner = registry.family_of_variant(name)
    if owner is not None:
        command = " ".join([PROG, args.action, owner.name, *args.backends, "--variant", name])
        raise UsageError(f"--variant {name!r} is a {owner.name} variant, not a {family.name} one: {command}; "
                         f"{family.name}'s offline variants: {', '.join(family.offline_variants)}")


def _committed_folder(args, family):
    """The offline variant's committed model folder this run reads (None: none, or --torch-dir)."""
    if family is None or getattr(args, "torch_dir", None):
        return None
    return family.variant(getattr(args, "variant", None) or family.default_variant).local_dir


def _function(action: Action, family):
    """The library function that runs `action`; a kind without the action's evaluator: one generated line."""
    from NNDF.actions.skeleton import check_evaluated

    check_evaluated(action.name, family)
    return registry.load(action.function)


def _backends(args, action: Action, family) -> tuple[str, ...]:
    """The backends named (positionally or with --compare); for side-by-side actions, none named: every backend
    usable here."""
    chosen = list(args.backends) + list(getattr(args, "compare", None) or [])
    for name in chosen:
        if name not in registry.BACKENDS:
            raise UnknownChoice("backend", name, registry.BACKENDS)
    if not chosen and action.side_by_side:
        options = {group: group.from_namespace(args) for group in registry.backend_option_groups()}
        chosen = [b for b in registry.backends_of(family) if registry.backend_class(b).availability(options)[0]]
    if not chosen:
        raise UsageError(f"name at least one backend: {', '.join(registry.BACKENDS)}")
    return tuple(dict.fromkeys(chosen))


def prepare(args) -> Callable[[], object]:
    """Everything checked before the action runs (the outputs, the family, the backends, every flag against its
    owner, the option groups' values), then the call that runs it: `prepare(args)()` returns the `Report`."""
    action = ACTIONS[args.action]
    if not action.runs_models:
        _check_outputs(args)
        return partial(registry.load(action.function), args.model,
                       *(group.from_namespace(args) for group in action.groups))
    family = registry.family(args.model)
    _check_variant(args, family)
    _check_outputs(args, family)
    function = _function(action, family)
    backends = _backends(args, action, family)
    flags.check(args, action, family, backends)
    groups = [group.from_namespace(args) for group in action.groups]
    owned = [group.from_namespace(args) for group in registry.backend_option_groups()]
    return partial(function, args.model, backends, *groups, *owned)


def dispatch(args) -> object:
    """Run the parsed command: resolve, check the flags by owner, build the groups, call the library function."""
    return prepare(args)()


def main(argv: list[str] | None = None) -> int:
    if not (ROOT / "data").is_dir():  # installed from a wheel: the packages without the clone's files they read
        say(f"error: the harness runs from a clone of its repository, not from installed packages ({ROOT} has no "
            "data/, offline models or checkpoint.toml files): pip install -e <the clone>")
        return 2
    parser = build_parser(sys.argv[1:] if argv is None else argv)
    args, extra = parser.parse_known_args(argv)
    if extra:  # a word the action's parser does not take: named with where it belongs
        say(f"error: {PROG} {args.action}: {_hinted(flags.unrecognized(ACTIONS[args.action], extra))}")
        return 2
    verbose = getattr(args, "verbose", False)
    _quiet_libraries(verbose)
    if getattr(args, "info", False):
        progress.FORCE = True
    json_path = getattr(args, "json", None)
    try:
        with contextlib.redirect_stdout(sys.stderr) if json_path == STDOUT else contextlib.nullcontext():
            report = dispatch(args)  # chat's answers and serve's status lines print as they come
            report.print()
        _write_json(report, json_path)
        sys.stdout.flush()  # a closed pipe fails here, not at exit
    except HarnessError as exc:
        if verbose and exc.__cause__ is not None:  # e.g. the exporter's own traceback behind a one-line error
            traceback.print_exception(exc.__cause__, file=sys.stderr)
        say(f"error: {exc}")
        return exc.exit_code
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    except BrokenPipeError:  # whoever read stdout stopped (`run.py list | head`): end quietly, as SIGPIPE would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's own flush must not fail again
        return 141
    except Exception as exc:  # noqa: BLE001 - only out-of-memory is the user's to fix; anything else is a bug
        what = _out_of_memory(exc)
        if what is None:
            raise
        if verbose:
            traceback.print_exception(exc, file=sys.stderr)
        say(f"error: out of memory ({what}): use a smaller --batch-size, shorter lengths or fewer beams")
        return 2
    return 0


def _out_of_memory(exc: BaseException) -> str | None:
    """What failed to allocate, in a few words, where `exc` is an allocation failure (None: it is not): MemoryError,
    torch's OutOfMemoryError (CUDA), the CPU allocator's failure (a RuntimeError), or ONNX Runtime's, whose message
    names the node and the bytes (its own exception types, not RuntimeError)."""
    text = str(exc)
    ort = re.search(r"running (\w+) node.*Failed to allocate memory for requested buffer of size (\d+)", text, re.S)
    if ort and type(exc).__module__.startswith("onnxruntime"):
        return f"ONNX Runtime could not allocate {int(ort[2]) / 1e9:.1f} GB for a {ort[1]}"
    if not (isinstance(exc, MemoryError) or exc.__class__.__name__ == "OutOfMemoryError" or (
            isinstance(exc, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text))):
        return None
    return (text.strip().splitlines() or [exc.__class__.__name__])[0][:160]


def _write_json(report, path: str | None) -> None:
    try:
        report.write_json(path)
    except OSError as exc:  # checked before the run; the place changed since (removed, filled up, ...)
        raise UsageError(f"--json {path}: cannot write it ({exc.strerror or exc}); the results are printed above") \
            from exc
