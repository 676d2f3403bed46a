"""Actions: one module per CLI action, each a library function that returns a `Report`, registered in `ACTIONS`.

benchmark.py (fixed-length random inputs), accuracy.py (LAMBADA), chat.py (interactive / --prompt),
checkpoint.py (`run` and `compare` over a family's checkpoint.toml), listing.py (`list`), deploy.py (a Triton
model repository) and serve.py (Triton Inference Server on loopback). `common.py` holds
what they share: opening a run, setting backends up one at a time, tokenising prompts.

An `Action` declares its option groups and its library function; the CLI (NNDF/cli.py) builds the parser from
the declaration and calls `function(model, backends, *groups, *backend_option_groups)`. Adding an action is
its module plus one line in `ACTIONS`. Functions are named as "module:function" strings and imported only when
the action runs, so `--help` stays light.

A kind of model may run an action its own way: its task's `actions` table names the function to run instead
(encoder models: `Encoder/`), its `refused_actions` say why an action does not apply (one line that names the
action to use), and its `ignores` name option fields it never reads (refused like an action's `ignores`). An
action whose `function` is None (`predict`) runs only for kinds that implement it.

`ignores` names the fields of the action's option groups that it does not read (`--batch-size` for `chat`, which
answers one prompt at a time): the CLI refuses those flags for the action in one line that says where they
apply, instead of accepting and ignoring them. A new action ignores nothing unless it says so.
"""
from __future__ import annotations

from dataclasses import dataclass

from NNDF.options import (AccuracyOptions, BenchmarkOptions, ChatOptions, ModelOptions, PredictOptions,
                          SamplingOptions, TimingOptions)
from NNDF.generate_options import GenerateOptions
from NNDF.triton.options import DeployOptions, ServeOptions


@dataclass(frozen=True)
class Action:
    name: str  # the CLI spelling
    help: str
    function: str | None  # "module:function" of the library function (None: only kinds that implement it)
    groups: tuple[type, ...] = ()  # option groups, in the order the function takes them after (model, backends)
    runs_models: bool = True  # takes MODEL and BACKEND...; False: the function takes (operand, *groups) (`list`)
    operand: tuple[str, str] | None = None  # runs_models=False: (metavar, help) of its one required operand
    side_by_side: bool = False  # --compare BACKEND...; with no backend named, every backend usable here
    ignores: frozenset[str] = frozenset()  # fields of `groups` this action does not read: their flags are refused

    def applies(self, group: type, name: str) -> bool:
        """Whether field `name` of option group `group` means something to this action."""
        return group in self.groups and name not in self.ignores


_RUN = (ModelOptions, SamplingOptions, TimingOptions)
_ONE_SEQUENCE = {"batch_size", "use_mask"}  # one prompt or passage at a time: no batch, never padded
_ONE_TOKEN_STEP = {"use_cuda_graph", "torch_compile", "compile_mode", "fused_decode"}  # speed-ups of generation's one-token steps

ACTIONS: dict[str, Action] = {a.name: a for a in (
    Action("accuracy", "LAMBADA TopN accuracy and perplexity", "NNDF.actions.accuracy:accuracy",
           (ModelOptions, AccuracyOptions),  # teacher forcing: no decoding, no one-token steps, text passages
           ignores=frozenset({*_ONE_SEQUENCE, *_ONE_TOKEN_STEP, "num_beams", "ignore_generation_config", "image"})),
    Action("benchmark", "fixed-length random inputs: latency, tokens/s, memory", "NNDF.actions.benchmark:benchmark",
           (*_RUN, BenchmarkOptions),  # random inputs (pixels too), always --output-seq-len tokens
           ignores=frozenset({"image", "min_new_tokens"})),
    Action("chat", "interactive prompts (or --prompt), several backends side by side", "NNDF.actions.chat:chat",
           (ModelOptions, SamplingOptions, ChatOptions), side_by_side=True, ignores=frozenset(_ONE_SEQUENCE)),
    Action("run", "golden samples from the family's checkpoint.toml", "NNDF.actions.checkpoint:run_samples", _RUN,
           ignores=frozenset({"percentile"})),  # medians only
    Action("compare", "`run` over several backends, side by side", "NNDF.actions.checkpoint:compare_backends", _RUN,
           side_by_side=True, ignores=frozenset({"percentile"})),
    Action("generate", "batches of your own prompts (--prompt or --dataset FILE.jsonl), several backends side by side",
           "NNDF.actions.generate:generate", (ModelOptions, SamplingOptions, GenerateOptions), side_by_side=True),
    Action("predict", "encoder models: embeddings or class labels of texts, several backends side by side", None,
           (ModelOptions, PredictOptions), side_by_side=True),
    Action("list", "families, variants, and which backends work here", "NNDF.actions.listing:list_models",
           runs_models=False),
    Action("deploy", "write a Triton Inference Server model repository for the model (--repository DIR)",
           "NNDF.actions.deploy:deploy", (ModelOptions, DeployOptions),
           ignores=frozenset({"batch_size", "use_mask", "num_beams", "image", "use_cuda_graph", "torch_compile",
                              "compile_mode", "fused_decode", "cleanup"})),  # served: masks always on, beams per request
    Action("serve", "serve a Triton model repository on 127.0.0.1 until Ctrl-C", "NNDF.actions.serve:serve",
           (ServeOptions,), runs_models=False, operand=("DIR", "the Triton model repository (run.py deploy writes one)")),
)}
