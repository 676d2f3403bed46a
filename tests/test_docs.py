"""The prose stays a map: the README is short enough to read in five minutes, every relative link in README.md,
docs/*.md and tools/README.md points at a file (and heading) that exists, and the docs speak of facts (a tool, a
version, a date), not of the work's bookkeeping ("issue 17", "seed 002")."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "tools" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
GENERATED = {ROOT / "docs" / "FLAGS.md"}  # written from the option groups by its own tool and test
BOOKKEEPING = re.compile(r"\bissue \d|\bissue's\b|\bseed ?0\d|\bseed's\b|\bhelpers?\b|\bthe lead\b|\bworkplace\b|"
                         r"\b(this|that|same|one) session\b", re.IGNORECASE)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to '-'."""
    heads = (line.lstrip("#").strip().lower() for line in page.read_text().splitlines() if line.startswith("#"))
    return {re.sub(r"[^\w\- ]", "", h).replace(" ", "-") for h in heads}


def test_readme_reads_in_five_minutes():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert 150 <= lines <= 250, f"README.md has {lines} lines; keep it between 150 and 250 (details go to docs/)"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_bookkeeping_vocabulary(page):
    hits = [f"{page.name}:{n}: {m.group(0)!r}" for n, line in enumerate(page.read_text().splitlines(), 1)
            for m in BOOKKEEPING.finditer(line)]
    assert not hits, "say the fact itself (a tool, a version, a date): " + "; ".join(hits)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    broken = []
    for link in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", link):
            continue  # http(s), mailto: not checked offline
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            if target not in GENERATED:
                broken.append(f"{link} (no such file)")
        elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
            broken.append(f"{link} (no such heading)")
    assert not broken, f"{page.relative_to(ROOT)}: " + ", ".join(broken)


def test_usage_names_every_family_and_offline_variant():
    """USAGE.md's "Families (MODEL)" paragraph against the registry (what `run.py list` shows)."""
    from NNDF import registry

    text = (ROOT / "docs" / "USAGE.md").read_text()
    paragraph = text[text.index("Families (`MODEL`)"):text.index("Random-weight models produce")]
    missing = [f"{name}" for name in registry.FAMILY_PACKAGES if f"`{name}`" not in paragraph]
    missing += [v.name for fam in registry.families().values() for v in fam.variants
                if v.offline and f"`{v.name}`" not in paragraph]
    assert not missing, f"docs/USAGE.md's families paragraph leaves out {', '.join(missing)}"
