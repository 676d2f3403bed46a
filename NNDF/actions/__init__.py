"""Actions: one module per CLI action, each a library function that returns a `Report`, registered in `ACTIONS`.

benchmark.py (fixed-length random inputs), accuracy.py (LAMBADA), chat.py (interactive / --prompt),
checkpoint.py (`run` and `compare` over a family's checkpoint.toml), listing.py (`list`). `common.py` holds
what they share: opening a run, setting backends up one at a time, tokenising prompts.

An `Action` declares its option groups and its library function; the CLI (NNDF/cli.py) builds the parser from
the declaration and calls `function(model, backends, *groups, *backend_option_groups)`. Adding an action is
its module plus one line in `ACTIONS`. Functions are named as "module:function" strings and imported only when
the action runs, so `--help` stays light.
"""
from __future__ import annotations

from dataclasses import dataclass

from NNDF.options import (AccuracyOptions, BenchmarkOptions, ChatOptions, ModelOptions, SamplingOptions,
                          TimingOptions)


@dataclass(frozen=True)
class Action:
    name: str  # the CLI spelling
    help: str
    function: str  # "module:function" of the library function
    groups: tuple[type, ...] = ()  # option groups, in the order the function takes them after (model, backends)
    runs_models: bool = True  # takes MODEL and BACKEND...; False: the function takes (model, **flags) (`list`)
    side_by_side: bool = False  # --compare BACKEND...; with no backend named, every backend usable here


_RUN = (ModelOptions, SamplingOptions, TimingOptions)

ACTIONS: dict[str, Action] = {a.name: a for a in (
    Action("accuracy", "LAMBADA TopN accuracy and perplexity", "NNDF.actions.accuracy:accuracy",
           (ModelOptions, AccuracyOptions)),
    Action("benchmark", "fixed-length random inputs: latency, tokens/s, memory", "NNDF.actions.benchmark:benchmark",
           (*_RUN, BenchmarkOptions)),
    Action("chat", "interactive prompts (or --prompt), several backends side by side", "NNDF.actions.chat:chat",
           (ModelOptions, SamplingOptions, ChatOptions), side_by_side=True),
    Action("run", "golden samples from the family's checkpoint.toml", "NNDF.actions.checkpoint:run_samples", _RUN),
    Action("compare", "`run` over several backends, side by side", "NNDF.actions.checkpoint:compare_backends", _RUN,
           side_by_side=True),
    Action("list", "families, variants, and which backends work here", "NNDF.actions.listing:list_models",
           runs_models=False),
)}
