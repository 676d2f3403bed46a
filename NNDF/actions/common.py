"""A run's lifetime by names: the family and backends named on the command line resolved through the registry,
then the core's run (NNDF/session.py, which serving uses too). Actions, tools and tests open runs here."""
from __future__ import annotations

from contextlib import contextmanager
from functools import partial
from typing import Iterator

from NNDF import registry, session
from NNDF.backends.base import Backend
from NNDF.context import RunContext
from NNDF.errors import WrongModelType
from NNDF.options import ModelOptions, OptionGroup
from NNDF.session import (decode, dry_breaker_ids, encode, finish, generate_prompt,  # noqa: F401
                          generation_config, note_export_check, torch_threads)


def open_run(family_name: str, options: ModelOptions, backends: tuple[str, ...],
             *backend_options: OptionGroup) -> RunContext:
    """Resolve the family, check every named backend (a bad name fails before any loading), then the run."""
    family = registry.family(family_name)
    chosen = [registry.backend(family, name) for name in backends]
    try:
        return session.open_run(family, options, chosen, *backend_options, bind=partial(registry.backend, family))
    except WrongModelType as exc:  # a model of another registered family: name it
        owner = registry.family_of_type(exc.model_type)
        if owner is None:
            raise
        raise WrongModelType(f"{exc}; {exc.model_type!r} models run as family {owner.name}: name {owner.name} "
                             f"instead of {family.name}", exc.model_type) from exc.__cause__


def backend_rows(run: RunContext, backends: tuple[str, ...]) -> list[tuple[str, Backend]]:
    """(label, backend) per result row: each named backend's `variants` (onnxrt: one per --quantize value)."""
    return session.backend_rows(run, [_bound(run, name) for name in backends])


@contextmanager
def backend_steps(run: RunContext, backend: str | Backend, threads: bool = True) -> Iterator[tuple[Backend, object]]:
    """`NNDF.session.backend_steps` for a backend given by name or bound."""
    with session.backend_steps(run, _bound(run, backend) if isinstance(backend, str) else backend, threads) as opened:
        yield opened


def _bound(run: RunContext, name: str) -> Backend:
    """The run's family's backend `name` (a run made without `open_run` binds through the registry here)."""
    return run.bind(name) if run.bind is not None else registry.backend(run.family, name)
