"""The core contracts: a backend or an action is added by registering it (no edits elsewhere), shared packages
know no family, and the import graph has no cycles."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch

from NNDF import cli, registry
from NNDF.actions import ACTIONS, Action
from NNDF.backends.base import Backend
from NNDF.options import ModelOptions
from NNDF.tasks import CausalLM

ROOT = Path(__file__).resolve().parent.parent
SHARED = ("NNDF", "Seq2Seq", "Vision2Seq", "Encoder")
CALLS: list = []


class ToyBackend(Backend):
    """A backend registered by this test only: PyTorch's steps under another name, for decoder-only tasks."""

    name = "toy"

    @classmethod
    def availability(cls, options=None):
        return True, "toy: always here"

    @classmethod
    def serves(cls, task) -> bool:
        return isinstance(task, CausalLM)

    def setup(self, run):
        from NNDF.backends.torch_steps import TorchSteps

        return TorchSteps(run.torch_model(), run.options.use_cache)


def toy_action(model: str, backends: tuple[str, ...], options: ModelOptions, *backend_options):
    """An action registered by this test only: records what the CLI passed and returns an empty report."""
    from NNDF.results import Report

    CALLS.append((model, backends, options, backend_options))
    return Report("toy", model, options.variant or "-", {})


@pytest.fixture
def toy_registered(monkeypatch):
    monkeypatch.setitem(registry.BACKENDS, "toy", registry.BackendEntry(f"{__name__}:ToyBackend"))
    monkeypatch.setitem(ACTIONS, "toy", Action("toy", "a test action", f"{__name__}:toy_action", (ModelOptions,)))
    CALLS.clear()


def test_registered_backend_serves_families_without_a_module(toy_registered, workdir):
    from NNDF.actions.common import backend_steps, encode, generate_prompt, open_run
    from NNDF.generation import GenerationConfig

    assert "toy" in registry.backends_of(registry.family("GPT2"))
    assert "toy" not in registry.backends_of(registry.family("T5"))  # it serves decoder-only tasks only
    run = open_run("GPT2", ModelOptions(working_dir=str(workdir), use_cache=True, device="cpu"), ("toy",))
    prompt = encode(run, ["The for statement is used to"])
    tokens = {}
    for name in ("toy", "frameworks"):
        with backend_steps(run, name) as (_, steps):
            tokens[name] = generate_prompt(steps, prompt, GenerationConfig(max_new_tokens=6)).sequences
    assert torch.equal(tokens["toy"], tokens["frameworks"])


def test_registered_action_is_on_the_command_line(toy_registered, capsys):
    assert cli.main(["toy", "GPT2", "toy", "--variant", "gpt2-offline", "--use-cache"]) == 0
    (model, backends, options, backend_options), = CALLS
    assert (model, backends, options.variant, options.use_cache) == ("GPT2", ("toy",), "gpt2-offline", True)
    assert [type(g).__name__ for g in backend_options] == ["ORTOptions", "TRTOptions", "TritonOptions"]  # every backend's own flags
    assert "toy" in capsys.readouterr().out


def test_list_shows_a_registered_backend(toy_registered):
    from NNDF.actions.listing import backend_status

    assert ("toy", True) in {(b.backend, b.usable) for b in backend_status()}


def _python_files(*packages: str) -> list[Path]:
    return [p for pkg in packages for p in sorted((ROOT / pkg).rglob("*.py"))]


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.AST, module: str) -> set[str]:
    """Every module imported anywhere in the file (function-local imports too; `if TYPE_CHECKING:` blocks are
    annotations only and do not run)."""
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for child in node.body for n in ast.walk(child)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def test_import_graph_has_no_cycles():
    packages = (*SHARED, *registry.FAMILY_PACKAGES)
    files = {_module(p): p for p in _python_files(*packages)}
    graph = {m: {i for i in _imports(ast.parse(p.read_text()), m) if i in files and i != m} for m, p in files.items()}
    cycles, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for nxt in graph[node]:
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


FAMILY_ATTRIBUTES = {"n_layer", "n_head", "n_embd", "n_positions", "d_model", "d_kv", "num_layers", "num_heads",
                     "decoder_layers", "encoder_layers", "num_decoder_layers", "decoder_attention_heads"}


def _config_reads(tree: ast.AST) -> list[str]:
    """Attributes read from a config object: `config.x`, `model.config.x`, `getattr(config, "x")`."""
    reads = [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and "config" in ast.unparse(n.value)]
    return reads + [n.args[1].value for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) ==
                    "getattr" and len(n.args) > 1 and "config" in ast.unparse(n.args[0])
                    and isinstance(n.args[1], ast.Constant)]


def _code_strings(tree: ast.AST) -> list[str]:
    """String constants that are not docstrings (messages, keys, getattr names)."""
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docs]


def test_shared_packages_know_no_family():
    names = re.compile(r"\b(" + "|".join(registry.FAMILY_PACKAGES) + r")\b")
    problems = []
    for path in _python_files(*SHARED):
        if path == ROOT / "NNDF" / "registry.py":  # the registration list: the one place that names families
            continue
        tree = ast.parse(path.read_text())
        where = path.relative_to(ROOT)
        problems += [f"{where}: string {s!r}" for s in _code_strings(tree) if names.search(s)]
        problems += [f"{where}: identifier {n.id}" for n in ast.walk(tree) if isinstance(n, ast.Name) and names.search(n.id)]
        problems += [f"{where}: config attribute {a}" for a in _config_reads(tree) if a in FAMILY_ATTRIBUTES]
        problems += [f"{where}: imports family {i}" for i in _imports(tree, "") if i.split(".")[0] in registry.FAMILY_PACKAGES]
    assert not problems, "\n".join(problems)


def test_every_family_binds_each_backend_one_way():
    """Each family backend module is `BACKEND = FAMILY.task.backend(name[, EXPORT])`, a `Backend` of its task."""
    for fam in registry.families().values():
        for name in registry.backends_of(fam):
            backend = registry.backend(fam, name)
            assert isinstance(backend, Backend) and backend.name == name and backend.task is fam.task
            module = ROOT / fam.name / f"{name}.py"
            if not module.is_file():  # bound through the class's `serves(task)` (the triton client backend)
                assert registry.backend_class(name).serves(fam.task)
                continue
            assert f'FAMILY.task.backend("{name}"' in module.read_text()
