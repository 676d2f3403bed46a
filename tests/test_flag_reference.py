"""docs/FLAGS.md is generated from the option groups (`NNDF.flags.reference`): the committed file is current, and
every flag the command line takes is in it under the group that owns it."""
from __future__ import annotations

import argparse
import re
from dataclasses import fields

from conftest import ROOT
from NNDF import cli, flags
from NNDF.actions import ACTIONS


def test_committed_reference_is_the_generated_one():
    committed = (ROOT / "docs" / "FLAGS.md").read_text(encoding="utf-8")
    assert committed == flags.reference(), "docs/FLAGS.md is stale: run python -m NNDF.flags"


def test_every_flag_is_in_the_reference_under_its_owner():
    sections = {part.split("\n", 1)[0]: part for part in flags.reference().split("\n## ")[1:]}
    groups = {g for a in ACTIONS.values() for g in flags.parsed_groups(a)}
    assert len(sections) == len(groups)
    for group in groups:
        for f in fields(group):
            assert sections[group.title].count(f"| `{group.flag_name(f.name)}`") == 1, (group.title, f.name)


def test_every_flag_any_parser_takes_is_in_the_committed_reference():
    """Flags an action's parser adds outside the option groups too (`--compare`; `--json` of list and serve)."""
    reference = (ROOT / "docs" / "FLAGS.md").read_text(encoding="utf-8")
    parser = cli.build_parser()
    actions = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    for name, sub in actions.items():
        for option in (o for a in sub._actions for o in a.option_strings if o not in ("-h", "--help")):
            assert re.search(rf"`{option}[` ]", reference), (name, option)


def test_every_owner_group_has_an_owner_and_each_flag_one_owner_per_action():
    for action in ACTIONS.values():
        groups = flags.parsed_groups(action)
        assert all(group.owner and group.parts() == (group,) for group in groups), action.name
        names = [f.name for group in groups for f in fields(group)]
        assert len(names) == len(set(names)), action.name


def test_backend_groups_name_the_backend_whose_registry_entry_lists_them():
    from NNDF import registry

    for name, entry in registry.BACKENDS.items():
        for target in entry.options:
            assert all(name in part.backends for part in registry.load(target).parts()), (name, target)
    owned = {b for a in ACTIONS.values() for g in flags.parsed_groups(a) for b in g.backends}
    assert owned <= set(registry.BACKENDS)
