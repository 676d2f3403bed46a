"""The action contract: a new action is its own module plus one `ACTIONS` entry. This file is such a module: a toy
action whose library function runs the one skeleton (NNDF/actions/skeleton.py) with an evaluator it supplies for
the generative kinds; no kind's file names it, and a kind without an evaluator for it (encoder models) gets the
one generated line, exit 2."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from NNDF import cli, registry
from NNDF.actions import ACTIONS, Action
from NNDF.actions.skeleton import run_action
from NNDF.errors import UsageError
from NNDF.evaluate import Evaluator
from NNDF.generation import GenerationConfig
from NNDF.options import ModelOptions
from NNDF.session import encode, generate_prompt
from NNDF.tasks import GenerativeTask

CALLS: list[str] = []
NEW = 3


@dataclass(frozen=True)
class ToyRow:
    backend: str
    tokens: tuple[int, ...]

    def row(self) -> dict:
        return {"backend": self.backend, "tokens": " ".join(map(str, self.tokens))}


class ToyEvaluator(Evaluator):
    """The toy action for every generative kind: three greedy tokens of one sample prompt per backend row."""

    def check(self, task) -> None:
        CALLS.append("check")

    def begin(self, run, report) -> None:
        CALLS.append("begin")
        report.settings = {"device": run.device.type, "new_tokens": NEW}
        self.prompt = encode(run, [run.family.task.sample_item({"input": "The for statement is used to"})])

    def evaluate(self, run, name: str, backend, steps, report):
        CALLS.append(f"evaluate {name}")
        out = generate_prompt(steps, self.prompt, GenerationConfig(max_new_tokens=NEW, min_new_tokens=NEW))
        return tuple(out.new_tokens(0, None))

    def end(self, run, report, outcomes: list) -> None:
        CALLS.append("end")
        report.results = [ToyRow(name, tokens) for name, tokens in outcomes]
        report.notes.append(f"rows agree: {len({tokens for _, tokens in outcomes}) == 1}")


def toy(family: str, backends: tuple[str, ...], options: ModelOptions, *backend_options) -> object:
    """The toy action's library function: the skeleton, nothing else."""
    return run_action("toy", family, backends, options, (), backend_options)


TOY = Action("toy", "a test action: three greedy tokens per backend", f"{__name__}:toy", (ModelOptions,),
             does="counts three tokens", instead="run", evaluators=((GenerativeTask, ToyEvaluator),))


@pytest.fixture
def toy_registered(monkeypatch):
    monkeypatch.setitem(ACTIONS, "toy", TOY)  # the one registration
    CALLS.clear()


def test_no_kind_names_the_toy_action():
    for fam in registry.families().values():
        assert "toy" not in fam.task.evaluators
        assert fam.task.evaluator("toy") is None


@pytest.mark.parametrize("family", ["GPT2", "T5"])
def test_the_toy_action_runs_through_the_skeleton(toy_registered, workdir, capsys, family):
    assert cli.main(["toy", family, "frameworks", "-wd", str(workdir), "--device", "cpu"]) == 0
    assert CALLS == ["check", "begin", "evaluate frameworks", "end"]
    out = capsys.readouterr().out
    assert f"toy: {family}" in out and "| frameworks |" in out and "rows agree: True" in out


def test_a_kind_without_the_evaluator_gets_one_generated_line(toy_registered, workdir, capsys):
    assert cli.main(["toy", "BERT", "frameworks", "-wd", str(workdir)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err == ["error: BERT: toy counts three tokens; encoder models embed or classify it: use run"]
    assert CALLS == []  # refused before anything ran
    with pytest.raises(UsageError, match="BERT: toy counts three tokens"):  # the library function says the same
        toy("BERT", ("frameworks",), ModelOptions(working_dir=str(workdir)))


def test_predict_and_generate_lines_are_generated_from_the_declarations():
    bert, gpt2 = registry.family("BERT"), registry.family("GPT2")
    assert ACTIONS["generate"].unavailable(bert) == ("BERT: generate writes text; encoder models embed or classify "
                                                     "it: use predict")
    assert ACTIONS["predict"].unavailable(gpt2) == ("GPT2: predict is for encoder models (embeddings, "
                                                    "classification); decoder models generate text: use generate")
