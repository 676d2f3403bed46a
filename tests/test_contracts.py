"""The core contracts: a backend, a kind or an action is added by its own code plus one registration (no edits
elsewhere), shared packages know no family, the import graph (type-only imports and "module:attr" string targets
included) has no cycles, and no layer imports a layer above it."""
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
from CausalLM.task import CausalLM
from NNDF.backends.torch.backend import TorchAdapter
from NNDF.family import Family, Variant

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("CausalLM", "Seq2Seq", "Vision2Seq", "Encoder")
SHARED = ("NNDF", *KINDS)
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
        from CausalLM.torch_steps import TorchSteps

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


class ToyKind(CausalLM):
    """A kind registered by this test only: decoder-only prompting under its own label, its own PyTorch adapter,
    and the decoder-only kind's ONNX artifact for ONNX Runtime (served by the existing backends)."""

    kind = "toy"
    adapters = {"frameworks": f"{__name__}:ToyTorch", "onnxrt": "CausalLM.onnxrt:DecoderOnnx"}


class ToyTorch(TorchAdapter):
    """The toy kind on PyTorch: the HF model's own decoder steps."""

    def steps(self, backend, run):
        from CausalLM.torch_steps import TorchSteps

        return TorchSteps(run.torch_model(), run.options.use_cache)


TOY_FAMILY = Family(name="TOY", task=ToyKind(), description="a test family of the toy kind", model_types=("gpt2",),
                    variants=(Variant("gpt2-offline", local_dir=ROOT / "GPT2" / "offline" / "gpt2-offline"),),
                    default_variant="gpt2-offline")


@pytest.fixture
def toy_kind(monkeypatch):
    monkeypatch.setitem(registry.FAMILIES, "TOY", registry.FamilyEntry(f"{__name__}:TOY_FAMILY"))


def test_registered_kind_runs_on_the_existing_backends(toy_kind, workdir):
    from NNDF.actions.common import backend_steps, encode, generate_prompt, open_run
    from NNDF.generation import GenerationConfig

    family = registry.family("TOY")
    assert registry.backends_of(family) == ["frameworks", "onnxrt"]  # what its adapters name, nothing else
    options = ModelOptions(working_dir=str(workdir), use_cache=True, device="cpu")
    run = open_run("TOY", options, ("frameworks", "onnxrt"))
    prompt = encode(run, ["The for statement is used to"])
    expected = run.torch_model().generate(**family.task.hf_generate_inputs(run, prompt), max_new_tokens=6,
                                          do_sample=False)
    for name in ("frameworks", "onnxrt"):
        with backend_steps(run, name) as (_, steps):
            tokens = generate_prompt(steps, prompt, GenerationConfig(max_new_tokens=6)).sequences
        assert torch.equal(tokens, expected), name


def _python_files(*packages: str) -> list[Path]:
    return [p for pkg in packages for p in sorted((ROOT / pkg).rglob("*.py"))]


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


TARGET = re.compile(r"^([A-Za-z_]\w*(?:\.\w+)*):(\w+)$")  # a "module:attribute" string target


def _imports(tree: ast.AST) -> set[str]:
    """Every module imported anywhere in the file: function-local imports and `if TYPE_CHECKING:` ones too (a
    type-only import is still a dependency a reader and a type checker follow)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def _string_targets(tree: ast.AST) -> set[str]:
    """The modules named by "module:attribute" string constants (what `NNDF.registry.load` imports)."""
    return {m.group(1) for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            for m in [TARGET.match(n.value)] if m}


PACKAGES = (*SHARED, *registry.FAMILY_PACKAGES)


def _graph() -> dict[str, set[str]]:
    """Project module -> the project modules it depends on (imports and string targets)."""
    files = {_module(p): p for p in _python_files(*PACKAGES)}
    graph = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text())
        graph[module] = {i for i in _imports(tree) | _string_targets(tree) if i in files and i != module}
    return graph


def test_string_targets_name_modules_that_exist():
    """Every "module:attribute" constant of a project package names a project module (the graph follows it)."""
    files = {_module(p) for p in _python_files(*PACKAGES)}
    roots = {pkg.split(".")[0] for pkg in PACKAGES}
    missing = [f"{_module(path)}: {target}" for path in _python_files(*PACKAGES)
               for target in _string_targets(ast.parse(path.read_text()))
               if target.split(".")[0] in roots and target not in files]
    assert not missing, "string targets naming no module: " + "; ".join(missing)


# Edges that still close cycles, each named (a new cycle fails; once one is gone, strike it from this list): the
# served generative model binds its family by name through the registry (kinds name their deploy evaluator, which
# writes that model); the action skeleton looks the action up in the table that names the action modules.
CYCLE_EDGES_KNOWN = {("NNDF.triton.generative", "NNDF.registry"), ("NNDF.actions.skeleton", "NNDF.actions")}


def test_import_graph_has_no_cycles():
    graph = _graph()
    assert not {(a, b) for a, b in CYCLE_EDGES_KNOWN if b not in graph[a]}, "gone: strike from CYCLE_EDGES_KNOWN"
    for a, b in CYCLE_EDGES_KNOWN:
        graph[a].discard(b)
    cycles, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_graph_sees_type_only_imports_and_string_targets():
    """The two edges an import-only scan misses are in the graph."""
    graph = _graph()
    assert "NNDF.tasks" in graph["NNDF.family"]  # `if TYPE_CHECKING:` only
    assert "CausalLM.onnxrt" in graph["CausalLM.task"]  # "CausalLM.onnxrt:DecoderOnnx"
    assert "GPT2.config" in graph["NNDF.registry"]  # "GPT2.config:FAMILY"


# Layers, bottom to top: a module imports (or names as a string target) only modules of its own layer or below.
# The longest matching prefix decides a module's layer.
LAYERS = (
    ("core", ("NNDF",)),
    ("backends", ("NNDF.backends",)),
    ("kinds", (*KINDS, "NNDF.session", "NNDF.evaluate")),  # the generative kinds' evaluators, a run's lifetime
    ("families", registry.FAMILY_PACKAGES),
    ("serving", ("NNDF.triton", "Encoder.triton.configs", "Encoder.triton.deploy", "Encoder.triton.readme",
                 "Encoder.triton.serving")),
    ("binder", ("NNDF.registry", "NNDF.actions", "NNDF.cli", "NNDF.flags")),  # the top: binds, runs
)
ORDER = tuple(name for name, _ in LAYERS)
# Where code runs upward today, each edge named (a new one fails; a fixed one must be struck from this list): the
# served generative model binding its family by name through the registry, and the kinds' tables naming their
# `deploy` evaluator, which writes a served model (serving).
UPWARD_KNOWN = {
    ("NNDF.triton.generative", "NNDF.registry"), ("NNDF.evaluate.table", "NNDF.triton.generative_deploy"),
    ("Encoder.task", "Encoder.triton.deploy")}


def layer(module: str) -> str:
    matches = [(len(p), name) for name, prefixes in LAYERS for p in prefixes
               if module == p or module.startswith(p + ".")]
    assert matches, f"{module} is in no layer"
    return max(matches)[1]


def test_no_layer_imports_a_layer_above_it():
    upward = {(m, d) for m, deps in _graph().items() for d in deps
              if ORDER.index(layer(d)) > ORDER.index(layer(m))}
    new = sorted(upward - UPWARD_KNOWN)
    assert not new, "upward imports: " + "; ".join(f"{m} ({layer(m)}) -> {d} ({layer(d)})" for m, d in new)
    assert not UPWARD_KNOWN - upward, f"fixed, strike from UPWARD_KNOWN: {sorted(UPWARD_KNOWN - upward)}"


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
        problems += [f"{where}: imports family {i}" for i in _imports(tree) if i.split(".")[0] in registry.FAMILY_PACKAGES]
    assert not problems, "\n".join(problems)


FAMILY_FILES = ("config.py", "export.py", "frameworks.py", "onnxrt.py", "trt.py", "checkpoint.toml")


def test_every_family_has_the_five_files_and_declares_only_facts():
    """Each family package keeps the user's layout; each backend module's `BACKEND` is the family's facts there (a
    `BackendFacts`), and the registry's entry names exactly those modules."""
    from NNDF.family import BackendFacts

    for name, entry in registry.FAMILIES.items():
        assert [f for f in FAMILY_FILES if not (ROOT / name / f).is_file()] == [], name
        assert entry.family == f"{name}.config:FAMILY"
        assert entry.backends == {b: f"{name}.{b}:BACKEND" for b in ("frameworks", "onnxrt", "trt")}
        for target in entry.backends.values():
            assert isinstance(registry.load(target), BackendFacts), target


def test_every_family_binds_each_backend_through_the_registry():
    """Each (family, backend) binds to the backend's registered class, with the kind's adapter and the family's
    facts; registration is tables, never a probe for a module or a glob."""
    for fam in registry.families().values():
        for name in registry.backends_of(fam):
            backend = registry.backend(fam, name)
            assert isinstance(backend, Backend) and backend.name == name and backend.task is fam.task
            assert type(backend) is registry.backend_class(name)
            assert backend.spec == (registry.facts(fam, name).spec or backend.spec)
    source = (ROOT / "NNDF" / "registry.py").read_text()
    assert "find_spec" not in source and "glob" not in source and "import_module" in source
