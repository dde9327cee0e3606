"""Relative links between the docs resolve: the file exists and a ``#anchor`` names one of its
headings (GitHub's slugs), so a moved section breaks this test rather than a reader's click."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted([*REPO.glob("*.md"), *(REPO / "docs").glob("*.md"), *(REPO / "bench").glob("*.md")])
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|__", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", doc.read_text()).splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(doc: Path) -> list[str]:
    return [t for t in LINK.findall(FENCE.sub("", doc.read_text()))
            if not re.match(r"[a-z]+:", t)]  # web and mail links are not checked here


def test_the_slugs_follow_githubs_rule() -> None:
    assert slug("Building the image") == "building-the-image"
    assert slug("Datasets (`headrace datasets put | list | show`)") == \
        "datasets-headrace-datasets-put--list--show"


def test_there_are_relative_links_to_check() -> None:
    assert sum(len(links(d)) for d in DOCS) > 10


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO)) for d in DOCS])
def test_every_relative_link_resolves_to_a_file_and_heading(doc: Path) -> None:
    broken = []
    for target in links(doc):
        path, _, anchor = target.partition("#")
        where = (doc.parent / path).resolve() if path else doc
        if not where.exists():
            broken.append(f"{target}: no file {where}")
        elif anchor and where.suffix == ".md" and anchor not in anchors(where):
            broken.append(f"{target}: no heading #{anchor} in {where.relative_to(REPO)}")
    assert not broken, f"{doc.relative_to(REPO)}: " + "; ".join(broken)
