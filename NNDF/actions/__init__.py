"""Actions: one module per CLI action, each a library function that returns a `Report`, registered in `ACTIONS`.

benchmark.py (fixed-length random inputs), accuracy.py (a dataset's scores), chat.py (interactive / --prompt),
checkpoint.py (`run` and `compare` over a family's checkpoint.toml), generate.py (batches of the user's prompts),
predict.py (encoders' embeddings or labels), build.py (a run's artifacts, nothing run), listing.py (`list`),
deploy.py (a Triton model repository) and serve.py (Triton Inference Server on loopback).

Every action that runs models is written once, in skeleton.py: open the run, one row per backend (its steps set
up, evaluated and freed), export notes, agreement between rows, the report, cleanup. What differs per kind of
model is the kind's *evaluator* for the action (`registry.evaluator(task, name)`, NNDF/evaluate/); a kind with none
gets one generated line (`Action.unavailable`), which names the action to use instead where the declaration
names one (`instead`). A new action may supply evaluators for kinds that do not know it (`evaluators`).

An `Action` declares its library function, the library groups it takes (`groups`, in the function's order after
(model, backends)) and the owner groups whose flags it reads (`reads`, NNDF/options.py; default: every part of
`groups`). The CLI (NNDF/cli.py) builds the parser from the declaration, accepts a flag only when its owner group
is read here (and added by the model's kind, and its backend named), and calls
`function(model, backends, *groups, *backend_option_groups)`. Adding an action is its module plus one line in
`ACTIONS`. Functions are named as "module:function" strings and imported only when the action runs, so `--help`
stays light.
"""
from __future__ import annotations

from dataclasses import dataclass

from NNDF.chat_template import ChatTemplateOptions
from NNDF.generate_options import GenerateOptions
from NNDF.options import (AccuracyDataOptions, AccuracyOptions, BatchOptions, BenchmarkGenerationOptions,
                          BenchmarkInputOptions, BenchmarkOptions, CacheOptions, ChatOptions, CleanupOptions,
                          CudaGraphOptions, DecodingOptions, DeviceOptions, FusedStepOptions, GraphFileOptions,
                          HeadOptions, ImageOptions, MaskOptions, MinLengthOptions, ModelOptions, OutputOptions,
                          PredictOptions, ReportFileOptions, SamplerOptions, SamplingOptions, ScoringOptions,
                          SeedOptions, SourceOptions, PercentileOptions, TimingLoopOptions, TimingOptions,
                          TorchCompileOptions)
from NNDF.triton.options import DeployOptions, RepositoryOptions, RequestLimitOptions, ServeOptions


@dataclass(frozen=True)
class Action:
    name: str  # the CLI spelling
    help: str
    function: str  # "module:function" of the library function
    groups: tuple[type, ...] = ()  # library groups, in the order the function takes them after (model, backends)
    runs_models: bool = True  # takes MODEL and BACKEND...; False: the function takes (operand, *groups) (`list`)
    operand: tuple[str, str] | None = None  # runs_models=False: (metavar, help) of its one required operand
    side_by_side: bool = False  # --compare BACKEND...; with no backend named, every backend usable here
    reads: tuple[type, ...] | None = None  # owner groups whose flags it takes (None: every part of `groups`)
    does: str = ""  # what it does, for the line a kind without its evaluator gets ("generates text")
    instead: str | None = None  # the action to use where a kind has no evaluator for this one
    evaluators: tuple = ()  # (Task subclass, evaluator class or "module:Class"): what it supplies for kinds

    def owner_groups(self) -> tuple[type, ...]:
        """Every owner group of the action's library groups: their flags are parsed (those it does not read,
        to be refused by name); an action that runs no model also takes --json (the CLI writes its report)."""
        parts = tuple(part for group in self.groups for part in group.parts())
        return parts if self.runs_models else (*parts, ReportFileOptions)

    def read_groups(self) -> tuple[type, ...]:
        """The owner groups whose flags this action takes, in `owner_groups` order."""
        return self.owner_groups() if self.reads is None else \
            tuple(g for g in self.owner_groups() if g in self.reads)

    def unavailable(self, family) -> str:
        """The one line for a family whose kind has no evaluator for this action."""
        task = family.task
        what = (f"{self.name} {self.does}; {task.kind} models {task.does}" if self.does and task.does
                else f"{self.name} does not apply to {task.kind} models")
        return f"{family.name}: {what}" + (f": use {self.instead}" if self.instead else "")


_MODEL = (SourceOptions, DeviceOptions, OutputOptions, HeadOptions, GraphFileOptions)  # every model action's
_STEPS = (CleanupOptions, BatchOptions, MaskOptions, CacheOptions, CudaGraphOptions, TorchCompileOptions,
          FusedStepOptions, DecodingOptions)  # actions that run the model's steps on batches
_DECODE = (SamplerOptions, MinLengthOptions, SeedOptions)

ACTIONS: dict[str, Action] = {a.name: a for a in (
    Action("accuracy", "LAMBADA TopN accuracy and perplexity", "NNDF.actions.accuracy:accuracy",
           (ModelOptions, AccuracyOptions),  # teacher forcing: no decoding, no one-token steps, text passages
           reads=(*_MODEL, CleanupOptions, CacheOptions, AccuracyDataOptions, ScoringOptions)),
    Action("benchmark", "fixed-length random inputs: latency, tokens/s, memory", "NNDF.actions.benchmark:benchmark",
           (ModelOptions, SamplingOptions, TimingOptions, BenchmarkOptions),  # random inputs (pixels too)
           reads=(*_MODEL, *_STEPS, SamplerOptions, SeedOptions, TimingLoopOptions, PercentileOptions,
                  BenchmarkInputOptions, BenchmarkGenerationOptions)),  # always --output-seq-len tokens
    Action("chat", "interactive prompts (or --prompt), several backends side by side", "NNDF.actions.chat:chat",
           (ModelOptions, SamplingOptions, ChatOptions, ChatTemplateOptions), side_by_side=True,  # one at a time
           reads=(*_MODEL, CleanupOptions, CacheOptions, CudaGraphOptions, TorchCompileOptions, FusedStepOptions,
                  DecodingOptions, ImageOptions, *_DECODE, ChatOptions, ChatTemplateOptions),
           does="generates text", instead="predict"),
    Action("run", "golden samples from the family's checkpoint.toml", "NNDF.actions.checkpoint:run_samples",
           (ModelOptions, SamplingOptions, TimingOptions),
           reads=(*_MODEL, *_STEPS, ImageOptions, *_DECODE, TimingLoopOptions)),  # medians only
    Action("compare", "`run` over several backends, side by side", "NNDF.actions.checkpoint:compare_backends",
           (ModelOptions, SamplingOptions, TimingOptions), side_by_side=True,
           reads=(*_MODEL, *_STEPS, ImageOptions, *_DECODE, TimingLoopOptions)),
    Action("generate", "batches of your own prompts (--prompt or --dataset FILE.jsonl), several backends side by side",
           "NNDF.actions.generate:generate", (ModelOptions, SamplingOptions, GenerateOptions, ChatTemplateOptions),
           side_by_side=True,
           does="writes text", instead="predict"),
    Action("predict", "encoder models: embeddings or class labels of texts, several backends side by side",
           "NNDF.actions.predict:predict", (ModelOptions, PredictOptions), side_by_side=True,
           reads=(*_MODEL, CleanupOptions, BatchOptions, CudaGraphOptions, TorchCompileOptions, PredictOptions),
           does="is for encoder models (embeddings, classification)", instead="generate"),
    Action("build", "prepare a run's artifacts (ONNX exports, quantized graphs, TensorRT engines) without running "
           "the model: build seconds and sizes", "NNDF.actions.build:build", (ModelOptions,),
           reads=(*_MODEL, BatchOptions, CacheOptions, FusedStepOptions, DecodingOptions)),  # what artifacts depend on
    Action("list", "families, variants, and which backends work here", "NNDF.actions.listing:list_models",
           runs_models=False),
    Action("deploy", "write a Triton Inference Server model repository for the model (--repository DIR)",
           "NNDF.actions.deploy:deploy", (ModelOptions, DeployOptions),  # served: masks always on, beams per request
           reads=(*_MODEL, CacheOptions, FusedStepOptions, RepositoryOptions, RequestLimitOptions)),
    Action("serve", "serve a Triton model repository on 127.0.0.1 until Ctrl-C", "NNDF.actions.serve:serve",
           (ServeOptions,), runs_models=False, operand=("DIR", "the Triton model repository (run.py deploy writes one)")),
)}
