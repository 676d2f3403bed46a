"""Actions: one module per CLI action, each a library function that returns a `Report`, registered in `ACTIONS`.

benchmark.py (fixed-length random inputs), accuracy.py (a dataset's scores), chat.py (interactive / --prompt),
checkpoint.py (`run` and `compare` over a family's checkpoint.toml), generate.py (batches of the user's prompts),
predict.py (encoders' embeddings or labels), listing.py (`list`), deploy.py (a Triton model repository) and
serve.py (Triton Inference Server on loopback).

Every action that runs models is written once, in skeleton.py: open the run, one row per backend (its steps set
up, evaluated and freed), export notes, agreement between rows, the report, cleanup. What differs per kind of
model is the kind's *evaluator* for the action (`task.evaluator(name)`, NNDF/evaluate/); a kind with none
gets one generated line (`Action.unavailable`), which names the action to use instead where the declaration
names one (`instead`). A new action may supply evaluators for kinds that do not know it (`evaluators`).

An `Action` declares its option groups and its library function; the CLI (NNDF/cli.py) builds the parser from
the declaration and calls `function(model, backends, *groups, *backend_option_groups)`. Adding an action is
its module plus one line in `ACTIONS`. Functions are named as "module:function" strings and imported only when
the action runs, so `--help` stays light.

A kind's `ignores` name option fields it never reads (refused like an action's `ignores`).

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
    function: str  # "module:function" of the library function
    groups: tuple[type, ...] = ()  # option groups, in the order the function takes them after (model, backends)
    runs_models: bool = True  # takes MODEL and BACKEND...; False: the function takes (operand, *groups) (`list`)
    operand: tuple[str, str] | None = None  # runs_models=False: (metavar, help) of its one required operand
    side_by_side: bool = False  # --compare BACKEND...; with no backend named, every backend usable here
    ignores: frozenset[str] = frozenset()  # fields of `groups` this action does not read: their flags are refused
    does: str = ""  # what it does, for the line a kind without its evaluator gets ("generates text")
    instead: str | None = None  # the action to use where a kind has no evaluator for this one
    evaluators: tuple = ()  # (Task subclass, evaluator class or "module:Class"): what it supplies for kinds

    def applies(self, group: type, name: str) -> bool:
        """Whether field `name` of option group `group` means something to this action."""
        return group in self.groups and name not in self.ignores

    def unavailable(self, family) -> str:
        """The one line for a family whose kind has no evaluator for this action."""
        task = family.task
        what = (f"{self.name} {self.does}; {task.kind} models {task.does}" if self.does and task.does
                else f"{self.name} does not apply to {task.kind} models")
        return f"{family.name}: {what}" + (f": use {self.instead}" if self.instead else "")


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
           (ModelOptions, SamplingOptions, ChatOptions), side_by_side=True, ignores=frozenset(_ONE_SEQUENCE),
           does="generates text", instead="predict"),
    Action("run", "golden samples from the family's checkpoint.toml", "NNDF.actions.checkpoint:run_samples", _RUN,
           ignores=frozenset({"percentile"})),  # medians only
    Action("compare", "`run` over several backends, side by side", "NNDF.actions.checkpoint:compare_backends", _RUN,
           side_by_side=True, ignores=frozenset({"percentile"})),
    Action("generate", "batches of your own prompts (--prompt or --dataset FILE.jsonl), several backends side by side",
           "NNDF.actions.generate:generate", (ModelOptions, SamplingOptions, GenerateOptions), side_by_side=True,
           does="writes text", instead="predict"),
    Action("predict", "encoder models: embeddings or class labels of texts, several backends side by side",
           "NNDF.actions.predict:predict", (ModelOptions, PredictOptions), side_by_side=True,
           does="is for encoder models (embeddings, classification)", instead="generate"),
    Action("list", "families, variants, and which backends work here", "NNDF.actions.listing:list_models",
           runs_models=False),
    Action("deploy", "write a Triton Inference Server model repository for the model (--repository DIR)",
           "NNDF.actions.deploy:deploy", (ModelOptions, DeployOptions),
           ignores=frozenset({"batch_size", "use_mask", "num_beams", "image", "use_cuda_graph", "torch_compile",
                              "compile_mode", "fused_decode", "cleanup"})),  # served: masks always on, beams per request
    Action("serve", "serve a Triton model repository on 127.0.0.1 until Ctrl-C", "NNDF.actions.serve:serve",
           (ServeOptions,), runs_models=False, operand=("DIR", "the Triton model repository (run.py deploy writes one)")),
)}
