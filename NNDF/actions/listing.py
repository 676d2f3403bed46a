"""`list`: families, their variants, and which backends are usable on this machine, and why not."""
from __future__ import annotations

from dataclasses import dataclass

from NNDF import registry
from NNDF.results import Report, environment


@dataclass(frozen=True)
class FamilyEntry:
    family: str
    variant: str
    params: str
    offline: bool

    def row(self) -> dict:
        return {"family": self.family, "variant": self.variant, "size": self.params,
                "needs network": "no" if self.offline else "yes (or --torch-dir)"}


@dataclass(frozen=True)
class BackendEntry:
    backend: str
    usable: bool
    why: str

    def row(self) -> dict:
        return {"backend": self.backend, "usable here": "yes" if self.usable else "no", "details": self.why}


def backend_status() -> list[BackendEntry]:
    """Every registered backend: whether it can run here, and why not."""
    return [BackendEntry(name, *registry.backend_class(name).availability()) for name in registry.BACKENDS]


def list_models(family_name: str | None = None) -> Report:
    fams = [registry.family(family_name)] if family_name else list(registry.families().values())
    whose = f"{fams[0].name}'s variants" if family_name else "every family's variants"
    report = Report("list", family_name or "all", "-", {}, environment=environment(),
                    title=f"list: {whose} (--variant), then the backends and whether they work on this machine")
    for fam in fams:
        backends = ", ".join(registry.backends_of(fam))
        report.notes.append(f"{fam.name}: {fam.description}; backends: {backends}; default --variant {fam.default_variant}")
        report.results.extend(FamilyEntry(fam.name, v.name, v.params, v.offline) for v in fam.variants)
    report.extra = [BackendEntry(**b.__dict__) for b in backend_status()]
    return report
