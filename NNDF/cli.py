"""Command line: `python run.py <action> <MODEL> [backend ...] [flags]`, a thin adapter over the actions.

Each action's parser is built from the option dataclasses it uses; the action is one library call that
returns a `Report`, printed as a table and optionally written as JSON. Every `HarnessError` (and argparse's
own errors) becomes one line on stderr and exit code 2; library warnings are silenced unless --verbose.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings

from NNDF import progress
from NNDF.errors import HarnessError
from NNDF.options import (AccuracyOptions, BenchmarkOptions, ChatOptions, ModelOptions, SamplingOptions,
                          TimingOptions, TRTOptions)
from NNDF.registry import BACKEND_NAMES, FAMILY_PACKAGES

ACTIONS = {
    "accuracy": ("LAMBADA TopN accuracy and perplexity", (ModelOptions, AccuracyOptions, TRTOptions)),
    "benchmark": ("fixed-length random inputs: latency, tokens/s, memory",
                  (ModelOptions, SamplingOptions, TimingOptions, BenchmarkOptions, TRTOptions)),
    "chat": ("interactive prompts (or --prompt), several backends side by side",
             (ModelOptions, SamplingOptions, ChatOptions, TRTOptions)),
    "run": ("golden samples from the family's checkpoint.toml",
            (ModelOptions, SamplingOptions, TimingOptions, TRTOptions)),
    "compare": ("`run` over several backends, side by side",
                (ModelOptions, SamplingOptions, TimingOptions, TRTOptions)),
    "list": ("families, variants, and which backends work here", ()),
}


class _Parser(argparse.ArgumentParser):
    """argparse, but errors are one line and exit code 2."""

    def error(self, message):
        print(f"error: {self.prog}: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="run.py", description="HuggingFace models on PyTorch, ONNX Runtime and TensorRT: "
                     "accuracy, speed, chat.")
    sub = parser.add_subparsers(dest="action", required=True, parser_class=_Parser, metavar="ACTION")
    for action, (help_text, groups) in ACTIONS.items():
        p = sub.add_parser(action, help=help_text, description=help_text)
        if action == "list":
            p.add_argument("model", nargs="?", metavar="MODEL", help=f"one of {', '.join(FAMILY_PACKAGES)}")
            p.add_argument("--json", help="also write the listing as JSON to this path")
            continue
        p.add_argument("model", metavar="MODEL", help=f"model family: {', '.join(FAMILY_PACKAGES)}")
        p.add_argument("backends", nargs="*", metavar="BACKEND", help=f"any of {', '.join(BACKEND_NAMES)}")
        if action in ("chat", "compare"):
            p.add_argument("--compare", nargs="+", metavar="BACKEND", help="backends to run side by side "
                           "(default: every backend usable here)")
        for group in groups:
            group.add_to_parser(p)
    return parser


def _quiet_libraries(verbose: bool) -> None:
    if verbose:
        return
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    warnings.filterwarnings("ignore")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" bars: our own bars cover long work
    for name in ("torch", "torch.onnx", "onnxscript", "transformers", "onnx_ir"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _backends(args, family: str) -> tuple[str, ...]:
    from NNDF import registry

    chosen = list(args.backends) + list(getattr(args, "compare", None) or [])
    if not chosen and args.action in ("chat", "compare"):
        fam = registry.family(family)
        chosen = [b for b in registry.backends_of(fam) if registry.backend(fam, b).availability()[0]]
    if not chosen:
        raise HarnessError(f"name at least one backend: {', '.join(BACKEND_NAMES)}")
    for name in chosen:
        if name not in BACKEND_NAMES:
            from NNDF.errors import UnknownChoice

            raise UnknownChoice("backend", name, BACKEND_NAMES)
    return tuple(dict.fromkeys(chosen))


def dispatch(args) -> object:
    from NNDF.actions import accuracy, benchmark, build, chat, checkpoint, listing

    if args.action == "list":
        return listing.list_models(args.model)
    backends = _backends(args, args.model)
    opts = {g.__name__: g.from_namespace(args) for g in ACTIONS[args.action][1]}
    model, trt = opts["ModelOptions"], opts["TRTOptions"]
    if trt.build_only:
        return build.build_only(args.model, backends, model, trt)
    if args.action == "benchmark":
        return benchmark.benchmark(args.model, backends, model, opts["SamplingOptions"], opts["TimingOptions"],
                                   opts["BenchmarkOptions"], trt)
    if args.action == "accuracy":
        return accuracy.accuracy(args.model, backends, model, opts["AccuracyOptions"], trt)
    if args.action == "chat":
        return chat.chat(args.model, backends, model, opts["SamplingOptions"], opts["ChatOptions"], trt)
    return checkpoint.run_checkpoint(args.model, backends, model, opts["SamplingOptions"], opts["TimingOptions"],
                                     compare=args.action == "compare", trt=trt)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _quiet_libraries(getattr(args, "verbose", False))
    if getattr(args, "info", False):
        progress.FORCE = True
    try:
        report = dispatch(args)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    report.print()
    report.write_json(getattr(args, "json", None))
    return 0
