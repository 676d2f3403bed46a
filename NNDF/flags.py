"""Which flags are in play: an option group's owner (an action that reads it, a kind that adds it, a backend that
owns it) decides, for one action, one model's kind and the run's backends, whether its flags are shown and
accepted, and says in one line why not. `reference()` writes the same facts as docs/FLAGS.md.

A flag is in play iff its owner group is
- read by the action (`Action.read_groups`), unless the group is a backend's own (`backend_groups`: any action
  that runs a model hands every backend its own groups);
- added by the model's kind (`Task.option_groups`) where the group is read only by some kinds (`kind_owner`);
- read by a backend the run uses, where the group names its backends (`backends`: a backend's own groups, and an
  action's group only some backends read, as `--torch-compile`).
"""
from __future__ import annotations

import argparse
import difflib
from dataclasses import MISSING, fields

from NNDF import registry
from NNDF.actions import ACTIONS, Action
from NNDF.errors import PROG, UsageError
from NNDF.parts import PARTS


def backend_groups() -> tuple[type, ...]:
    """Every backend's own owner groups, in registry order (parts of `registry.backend_option_groups`)."""
    return tuple(part for group in registry.backend_option_groups() for part in group.parts())


def parsed_groups(action: Action) -> tuple[type, ...]:
    """The owner groups whose flags the action's parser takes: its library groups' parts, then the backends'."""
    return (*action.owner_groups(), *backend_groups()) if action.runs_models else action.owner_groups()


def kind_reads(task, group: type) -> bool:
    owner = group.kind_owner()
    return owner is None or owner in task.option_groups


def shown(action: Action, group: type, task=None, backends: tuple[str, ...] = ()) -> bool:
    """Whether `--help` shows the group for this action (and, when the model is known, its kind; when backends are
    named, only the groups they read)."""
    read = group in backend_groups() or group in action.read_groups()
    named = not backends or not group.backends or bool(set(group.backends) & set(backends))
    return read and named and (task is None or kind_reads(task, group))


def absent_parts(task) -> frozenset[str]:
    """Fields naming the user's files for parts this kind never has (`--decoder-onnx` for encoder models): left
    out of its `--help` (NNDF/parts.py refuses them, naming the parts it has)."""
    if task is None:
        return frozenset()
    return frozenset(f"{part}_{kind}" for part in PARTS if part not in task.parts(True) for kind in ("onnx", "engine"))


def _families_adding(group: type) -> list[str]:
    owner = group.kind_owner()
    return [name for name, fam in registry.families().items() if owner in fam.task.option_groups]


def _backend_refusal(flag: str, group: type, backends: tuple[str, ...]) -> str:
    owners = group.backends
    which = f"the {owners[0]} backend" if len(owners) == 1 else f"the {' and '.join(owners)} backends"
    name = owners[0] if len(owners) == 1 else f"{' or '.join(owners)},"
    return (f"{flag} is a flag of {which}, which this run does not use ({', '.join(backends)}): name {name} "
            "or drop the flag")


def refusal(args: argparse.Namespace, action: Action, family, backends: tuple[str, ...]) -> str | None:
    """One line for the first flag given whose owner is not in play (None: every flag given is)."""
    for group in parsed_groups(action):
        given = group.given(args)
        if not given:
            continue
        flag = getattr(args, "typed_as", {}).get(given[0]) or group.flag_name(given[0], getattr(args, given[0]))
        if not kind_reads(family.task, group):
            having = ", ".join(_families_adding(group))
            return (f"{flag} does not apply to {family.name} ({family.kind} models): it belongs to {group.owner}"
                    + (f" ({having})" if having else ""))
        if group not in backend_groups() and group not in action.read_groups():
            where = [a.name for a in ACTIONS.values() if group in a.read_groups()]
            return f"{flag} does not apply to {action.name} (it applies to {', '.join(where) or 'no action'})"
        if group.backends and not set(group.backends) & set(backends):
            return _backend_refusal(flag, group, backends)
    return None


def check(args: argparse.Namespace, action: Action, family, backends: tuple[str, ...]) -> None:
    problem = refusal(args, action, family, backends)
    if problem:
        raise UsageError(problem)


def _takes(group: type, word: str) -> bool:
    return any(word in _spellings(f) for f in fields(group))


def unrecognized(action: Action, words: list[str]) -> str:
    """One line for the first word of the command line the action's parser does not take: a flag of other actions
    names the actions that take it, a backend named after a flag says where backends go, anything else is named
    with this action's nearest flags."""
    word = words[0]
    flag = word.split("=", 1)[0]
    if flag.startswith("-"):
        where = [a.name for a in ACTIONS.values() if any(_takes(g, flag) for g in a.read_groups())
                 or a.runs_models and any(_takes(g, flag) for g in backend_groups())]
        if where:
            return f"{flag} does not apply to {action.name} (it applies to {', '.join(where)})"
        own = [s for g in parsed_groups(action) for f in fields(g) for s in _spellings(f)]
        near = difflib.get_close_matches(flag, own, n=3)
        return f"unrecognized argument {flag}" + (f": did you mean {' or '.join(near)}?" if near else "")
    if action.runs_models and word in registry.BACKENDS:
        return (f"{word}: backends go right after MODEL, before the flags ({PROG} {action.name} MODEL {word} ... "
                "[flags])")
    return f"unexpected argument {word!r}"


# --- the flag reference (docs/FLAGS.md) ---

def _default(f) -> str:
    value = f.default if f.default is not MISSING else f.default_factory()
    if value in (None, (), ""):
        return ""
    if isinstance(value, bool):
        return "on" if value else "off"
    return " ".join(map(str, value)) if isinstance(value, tuple) else str(value)


def _spellings(f) -> list[str]:
    """A field's flags, with the `--no-` forms argparse adds to an on/off flag (`--no-use-cache`)."""
    names = list(f.metadata["flags"])
    if f.metadata["argparse"].get("action") is argparse.BooleanOptionalAction:
        names += [f"--no-{name[2:]}" for name in names if name.startswith("--")]
    return names


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "\\n")


def _who(group: type) -> list[str]:
    """Who reads the group: the actions (or the backends), and the kinds where only some read it."""
    readers = [a for a in ACTIONS.values() if group in a.read_groups()]
    if group in backend_groups():
        lines = [f"- backends: {', '.join(group.backends)} (any action that runs a model, when one is named)"]
    else:
        lines = [f"- actions: {', '.join(a.name for a in readers)}"]
        if group.backends:
            lines.append(f"- backends: {', '.join(group.backends)} (the flags are refused where none is named)")
    if group.kind_owner():
        lines.append(f"- models: {group.owner} ({', '.join(_families_adding(group))})")
    elif group.backends or any(a.runs_models for a in readers):
        lines.append("- models: every kind")
    return lines


def reference() -> str:
    """docs/FLAGS.md: every flag, by owner group, with who reads it, its default and its help."""
    groups = [g for a in ACTIONS.values() for g in a.owner_groups()] + list(backend_groups())
    out = ["# Flags by owner", "",
           "Generated from the option groups (`NNDF/options.py`, the backends' option modules, `NNDF/flags.py`):",
           "`python -m NNDF.flags` writes this file and a test checks it is current. A flag is accepted only where",
           "its owner is in play: the action reads its group, the model's kind adds it (where only some kinds read",
           "it), the run names its backend (a backend's own flags). `python run.py ACTION MODEL [BACKEND ...] --help`",
           "shows exactly those.", "",
           f"`--compare BACKEND...` ({', '.join(a.name for a in ACTIONS.values() if a.side_by_side)}) names the",
           "backends to run side by side, as the positional `BACKEND...` does; with no backend named, these",
           "actions run every backend usable here.", ""]
    for group in dict.fromkeys(groups):
        out += [f"## {group.title}", "", *_who(group), "", "| flag | default | what it does |", "|---|---|---|"]
        for f in fields(group):
            spellings = ", ".join(f"`{s}`" for s in _spellings(f))
            out.append(f"| {spellings} | {_cell(_default(f))} | {_cell(f.metadata['help'])} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":  # python -m NNDF.flags [PATH]: write the reference (default docs/FLAGS.md)
    import sys
    from pathlib import Path

    path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "docs" / "FLAGS.md"
    path.write_text(reference(), encoding="utf-8")
    print(f"wrote {path}")
