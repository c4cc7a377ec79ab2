"""References into the documentation resolve.

Code, tests and docs cite sections (`docs/architecture.md §13.5`,
`docs/operations.md §14.5`) and invariants (`docs/architecture.md I7`); the docs link to
each other's headings (`[§13.9](architecture.md#139-live-orphan-sweep)`) and cite their
own sections (`§13.10`, `I17`). Every such reference must name an existing heading or
invariant, the invariant list must be numbered without gaps and name modules and tests
that exist, and nothing may cite a document outside the repository.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = {name: ROOT / "docs" / f"{name}.md" for name in ("architecture", "operations")}
SCANNED = ("runtime", "operator", "tests", "bench", "examples", "docs", "charts", "crds")
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".tpl", ".txt", ".java", ".sh"}
SKIPPED = {"__pycache__", "results", "scratch", "node_modules"}

OUTSIDE_DOC = re.compile(r"\b" + "DES" + r"IGN\b")
"""The design notes the code used to cite live outside the repository."""
HEADING = re.compile(r"^#{2,4} (\d+(?:\.\d+)*)\.? ", re.MULTILINE)
INVARIANT = re.compile(r"^- \*\*(I\d+)\.\*\* ", re.MULTILINE)
CITED_DOC = re.compile(r"docs/(architecture|operations)\.md")
TARGET = re.compile(r"[\s#*]*(?:(?:,|and)[\s#*]*)?(§\d+(?:\.\d+)*|I\d+)\b")
"""One cited target after ``docs/x.md`` (or after the previous target of a list); the
separators allow a citation that wraps onto a comment or docstring line."""
LINK = re.compile(r"\]\(((?:docs/)?(?:architecture|operations)\.md)?#([^)\s]+)\)")
OWN_SECTION = re.compile(r"§(\d+(?:\.\d+)*)")
OWN_INVARIANT = re.compile(r"\bI(\d+)\b")


def source_files() -> Iterator[Path]:
    yield ROOT / "README.md"
    yield ROOT / "Makefile"
    yield ROOT / "pyproject.toml"
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*")):
            if SKIPPED & set(path.relative_to(ROOT).parts) or not path.is_file():
                continue
            if path.suffix in SUFFIXES:
                yield path


@cache
def text_of(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


@cache
def sections(doc: str) -> frozenset[str]:
    return frozenset(HEADING.findall(text_of(DOCS[doc])))


@cache
def invariants() -> tuple[str, ...]:
    return tuple(INVARIANT.findall(text_of(DOCS["architecture"])))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    titles = re.findall(r"^#{1,6} (.+)$", text_of(path), re.MULTILINE)
    return frozenset(slug(t) for t in titles)


def resolves(doc: str, target: str) -> bool:
    if target.startswith("§"):
        return target[1:].rstrip(".") in sections(doc)
    return doc == "architecture" and target in invariants()


def citations(text: str) -> Iterator[tuple[int, str, str]]:
    """``(line, doc, target)`` of every ``docs/x.md §N`` / ``docs/x.md In`` citation,
    lists (``§2, §3.5``, ``I5, I6``) included."""
    for match in CITED_DOC.finditer(text):
        pos = match.end()
        while (target := TARGET.match(text, pos)) is not None:
            yield text.count("\n", 0, match.start()) + 1, match.group(1), target.group(1)
            pos = target.end()


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_the_docs_have_numbered_sections_and_invariants() -> None:
    assert {"1", "13.10", "14.10", "15"} <= sections("architecture")
    assert {"1", "7", "15"} <= sections("operations")
    ids = invariants()
    assert ids == tuple(f"I{n}" for n in range(1, len(ids) + 1)), "ids must run I1, I2, ..."
    assert len(ids) >= 20


def test_the_citation_parser_reads_lists_and_wrapped_lines() -> None:
    text = "see docs/architecture.md I5, I6 and docs/operations.md\n    # §14.5.1. Then I9."
    assert list(citations(text)) == [
        (1, "architecture", "I5"),
        (1, "architecture", "I6"),
        (1, "operations", "§14.5.1"),
    ]
    assert slug("2.2 `storage/` — object stores") == "22-storage--object-stores"


def test_nothing_cites_a_document_outside_the_repository() -> None:
    found = [
        f"{rel(path)}:{text_of(path).count(chr(10), 0, m.start()) + 1}"
        for path in source_files()
        if path != Path(__file__).resolve()
        for m in OUTSIDE_DOC.finditer(text_of(path))
    ]
    assert found == [], "cite docs/architecture.md (a section or an invariant) instead"


def test_every_citation_of_a_doc_section_or_invariant_resolves() -> None:
    broken = [
        f"{rel(path)}:{line}: docs/{doc}.md {target}"
        for path in source_files()
        for line, doc, target in citations(text_of(path))
        if not resolves(doc, target)
    ]
    assert broken == []


@pytest.mark.parametrize("path", [ROOT / "README.md", *DOCS.values()], ids=rel)
def test_every_link_to_a_heading_resolves(path: Path) -> None:
    broken: list[str] = []
    for match in LINK.finditer(text_of(path)):
        name, anchor = match.groups()
        target = path if name is None else ROOT / "docs" / Path(name).name
        if anchor not in anchors(target):
            broken.append(f"{name or rel(path)}#{anchor}")
    assert broken == []


@pytest.mark.parametrize("doc", sorted(DOCS))
def test_a_docs_own_section_and_invariant_citations_resolve(doc: str) -> None:
    """Bare ``§N`` in a doc cites its own sections unless the words just before name the
    other doc; bare ``In`` in architecture.md cites its own invariants."""
    text = text_of(DOCS[doc])
    other = "operations" if doc == "architecture" else "architecture"
    broken: list[str] = []
    for match in OWN_SECTION.finditer(text):
        before = text[max(0, match.start() - 40) : match.start()]
        target_doc = other if other in before.rsplit("\n\n", 1)[-1] else doc
        link = re.match(r"\]\((?:docs/)?(architecture|operations)\.md", text[match.end() :])
        if link is not None:  # the text of a link: its target decides
            target_doc = link.group(1)
        if f"docs/{target_doc}.md" in before[-16:]:
            continue  # a cross-document citation, checked above
        if match.group(1).rstrip(".") not in sections(target_doc):
            line = text.count("\n", 0, match.start()) + 1
            broken.append(f"docs/{doc}.md:{line}: {target_doc} §{match.group(1)}")
    if doc == "architecture":
        for match in OWN_INVARIANT.finditer(text):
            if f"I{match.group(1)}" not in invariants():
                line = text.count("\n", 0, match.start()) + 1
                broken.append(f"docs/{doc}.md:{line}: I{match.group(1)}")
    assert broken == []


def invariant_entries() -> dict[str, str]:
    text = text_of(DOCS["architecture"])
    section = text[text.index("## 15. Invariants") :]
    starts = list(INVARIANT.finditer(section))
    ends = [m.start() for m in starts[1:]] + [len(section)]
    return {m.group(1): section[m.start() : end] for m, end in zip(starts, ends, strict=True)}


@pytest.mark.parametrize("entry", sorted(invariant_entries(), key=lambda i: int(i[1:])))
def test_an_invariant_names_modules_and_tests_that_exist(entry: str) -> None:
    body = re.sub(r"\s+", " ", invariant_entries()[entry])
    assert "*Enforced:*" in body and "*Pinned:*" in body
    enforced, pinned = body.split("*Pinned:*")
    modules = re.findall(r"`([\w/]+\.py)`", enforced)
    assert modules, "name the modules that enforce it"
    missing = [m for m in modules if not (ROOT / "runtime" / "gic_runtime" / m).is_file()]
    tests = re.findall(r"`(tests/[\w/]+\.py)`", pinned)
    assert tests, "name the tests that pin it"
    missing += [t for t in tests if not (ROOT / t).is_file()]
    defined = "\n".join(text_of(ROOT / t) for t in tests if (ROOT / t).is_file())
    for name in re.findall(r"`((?:test_|Test)\w+)`", pinned):
        if not re.search(rf"^\s*(?:def|class) {name}\b", defined, re.MULTILINE):
            missing.append(name)
    assert missing == []
