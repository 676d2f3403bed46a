"""Option groups: frozen dataclasses that are the single source of a flag's spelling, default, help and checks.

Each field carries its flags and help in `metadata` (`flag(...)`); `add_to_parser` builds the argparse group from
them and `from_namespace` builds the dataclass back, so a flag is declared exactly once. A group's `check`
validates values (impossible sizes, contradicting flags) and raises `UsageError` with the valid range.

Flags are declared by owner. An *owner group* (a direct `OptionGroup` subclass) holds the flags one owner reads:
the actions that list it in `Action.reads` (NNDF/actions), the kinds whose `Task.option_groups` add it (when
`by_kind`), the backends named in `backends`. A *library group* (`ModelOptions`, `SamplingOptions`, `TRTOptions`,
...) is a dataclass that inherits several owner groups' fields: what the library functions take, so
`run.options.use_cache` reads the same whatever owns the flag. `parts()` gives a group's owner groups.

Every flag's argparse default is `argparse.SUPPRESS`: a flag the user gave is exactly an attribute of the parsed
namespace (`given`), so the CLI can refuse a flag whose owner is not in play instead of ignoring it;
`from_namespace` fills in the dataclass defaults for the rest.
"""
from __future__ import annotations

import argparse
import math
from dataclasses import MISSING, field, fields
from typing import ClassVar

from NNDF.errors import UsageError


def flag(default, *names: str, help: str, **argparse_kwargs):
    return field(default=default, metadata={"flags": names, "help": help, "argparse": argparse_kwargs})


def _positive(name: str, value: int, minimum: int = 1) -> None:
    if value < minimum:
        raise UsageError(f"{name} must be >= {minimum}, got {value}")


def finite_float(text: str) -> float:
    """argparse type for float flags: a finite number (`inf` / `nan` are refused, e.g. --duration inf never ends)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def int64(text: str) -> int:
    """argparse type for integer flags: what the libraries underneath accept (an int64)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer: {text!r}") from None
    if not -(2 ** 63) <= value < 2 ** 63:
        raise argparse.ArgumentTypeError(f"{text} is out of range (a 64-bit integer)")
    return value


def typed_as(namespace: argparse.Namespace) -> dict[str, str]:
    """How the user typed fields another flag filled in (field -> words), for refusals that name what was typed."""
    if not hasattr(namespace, "typed_as"):
        namespace.typed_as = {}
    return namespace.typed_as


class BatchSize(argparse.Action):
    """--batch-size N, or min opt max (a TensorRT profile, as transformer-deploy's convert takes it): the batch run
    is N (or opt); the three values also go to `batch_profile` (the encoder engines' group), which only encoder
    models on the trt backend read."""

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            numbers = [int(v) for v in values]
        except ValueError:
            parser.error(f"argument {option_string}: invalid integer in {' '.join(values)!r}")
        if len(numbers) not in (1, 3):
            parser.error(f"argument {option_string}: give N, or min opt max (got {len(numbers)} values)")
        if len(numbers) == 3:
            if not 1 <= numbers[0] <= numbers[1] <= numbers[2]:
                parser.error(f"argument {option_string}: min opt max must satisfy 1 <= min <= opt <= max, "
                             f"got {' '.join(values)}")
            namespace.batch_profile = tuple(numbers)
            typed_as(namespace)["batch_profile"] = f"{option_string} with three values (min opt max)"
        setattr(namespace, self.dest, numbers[len(numbers) // 2])


ACTIONS = {"BatchSize": BatchSize}  # argparse actions named in `flag(..., action=...)` by string


def _default(f):
    return f.default if f.default is not MISSING else f.default_factory()


class OptionGroup:
    """Mixin: argparse round-trip and chained checks for a dataclass of `flag` fields."""

    title: ClassVar[str] = "options"
    owner: ClassVar[str] = ""  # who reads these flags, in words ("image-to-text models"); "" for library groups
    by_kind: ClassVar[bool] = False  # read only by the kinds whose `Task.option_groups` add this group
    kind_scope: ClassVar[type | None] = None  # a backend's group read only by the kinds that add this (core) group
    backends: ClassVar[tuple[str, ...]] = ()  # the backends that read it (empty: not a backend's own)

    def __post_init__(self):
        """Every `check` along the class's bases, the owner groups' first, then the library group's own."""
        for cls in reversed(type(self).__mro__):
            check = cls.__dict__.get("check")
            if check is not None:
                check(self)

    @classmethod
    def parts(cls) -> tuple[type, ...]:
        """The owner groups this group is made of (an owner group: itself)."""
        bases = tuple(b for b in cls.__bases__ if issubclass(b, OptionGroup) and b is not OptionGroup)
        return tuple(p for b in bases for p in b.parts()) if bases else (cls,)

    @classmethod
    def kind_owner(cls) -> type | None:
        """The group a kind must add for this group to be read (None: every kind reads it)."""
        return cls if cls.by_kind else cls.kind_scope

    @classmethod
    def add_to_parser(cls, parser: argparse.ArgumentParser, shown: bool = True,
                      hidden: frozenset[str] = frozenset()) -> None:
        """Add every field's flags as one argparse group; `shown=False` (or a field named in `hidden`): parsed
        (so the CLI can refuse them by name, saying who owns them) but left out of `--help`."""
        group = parser.add_argument_group(cls.title) if shown else parser
        for f in fields(cls):
            meta = f.metadata
            kwargs = dict(meta["argparse"])
            kwargs["action"] = ACTIONS.get(kwargs.get("action"), kwargs.get("action"))
            if kwargs["action"] is None:
                del kwargs["action"]
            default = _default(f)
            if isinstance(default, bool) and "action" not in kwargs:
                kwargs["action"] = "store_true"
            elif "type" not in kwargs and "action" not in kwargs and default is not None:
                kwargs["type"] = type(default)
            if kwargs.get("type") in (float, int):  # numbers the libraries underneath can take
                kwargs["type"] = finite_float if kwargs["type"] is float else int64
            help_text = meta["help"] if shown and f.name not in hidden else argparse.SUPPRESS
            group.add_argument(*meta["flags"], dest=f.name, default=argparse.SUPPRESS, help=help_text, **kwargs)

    @classmethod
    def flag_name(cls, name: str, value=None) -> str:
        """The flag spelling of field `name` (its first, long spelling); with `value` False for an on/off flag, its
        `--no-` form (the one the user typed to get that value)."""
        f = next(f for f in fields(cls) if f.name == name)
        flag = f.metadata["flags"][0]
        negated = value is False and f.metadata["argparse"].get("action") is argparse.BooleanOptionalAction
        return f"--no-{flag[2:]}" if negated else flag

    def as_flags(self, *names: str) -> tuple[str, ...]:
        """The command-line flags that give the fields `names` their values here, in that order (a field at its
        default gives none), for a command printed to the user."""
        defaults = {f.name: _default(f) for f in fields(self)}
        flags: list[str] = []
        for name in names:
            value = getattr(self, name)
            if value == defaults[name]:
                continue
            flags.append(self.flag_name(name, value))
            if not isinstance(value, bool):
                flags.extend(map(str, value) if isinstance(value, tuple) else (str(value),))
        return tuple(flags)

    @classmethod
    def given(cls, ns: argparse.Namespace) -> list[str]:
        """Names of this group's fields the user gave on the command line."""
        return [f.name for f in fields(cls) if hasattr(ns, f.name)]

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace):
        values = {}
        for f in fields(cls):
            value = getattr(ns, f.name, MISSING)
            if value is MISSING:  # not given: the dataclass default
                value = _default(f)
            if isinstance(value, list):  # argparse gives lists for nargs; the dataclasses are frozen and hashable
                value = tuple(value)
            elif value is None and isinstance(f.default, tuple):
                value = f.default
            values[f.name] = value
        return cls(**values)
