"""Every relative link in the repository's Markdown resolves: its file exists, and its anchor
names a heading of that file as GitHub renders it.

The README links to docs/ by section (``docs/deployment.md#memory``), docs/ link back and to
each other, and a heading reworded or a section moved breaks them silently on GitHub: the page
opens at its top, or not at all. Anchors are GitHub's heading ids: the heading's text
lowercased, every character but letters, digits, spaces, hyphens and underscores removed,
each space a hyphen, and a heading id already taken suffixed ``-1``, ``-2``, ... (the
github-slugger rules). Links inside code (fenced blocks, inline spans) are text, not links.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\n[ \t]*\n).)+?\1", re.DOTALL)
_INLINE_LINK = re.compile(
    r"\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s<>]+)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)"
)
_REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:[ \t]*<?([^\s>]+)>?", re.MULTILINE)
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def tracked_markdown(root: Path) -> list[Path]:
    """The repository's tracked ``*.md`` files (git's list: not a virtualenv's or a
    node_modules' files); every ``*.md`` outside hidden and dependency directories where the
    tree is not a git checkout."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--", "*.md"],
            cwd=root,
            capture_output=True,
            check=True,
        ).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        skipped = {"node_modules", "build", "dist"}
        return sorted(
            path
            for path in root.rglob("*.md")
            if not any(p.startswith(".") or p in skipped for p in path.relative_to(root).parts)
        )
    return sorted(root / name for name in listed.split("\0") if name)


def without_code(text: str) -> str:
    """``text`` with fenced code blocks and inline code spans blanked, line numbers kept."""
    kept, fence = [], ""
    for line in text.split("\n"):
        opening = _FENCE.match(line)
        if fence:
            if opening and opening.group(1)[0] == fence[0] and len(opening.group(1)) >= len(fence):
                fence = ""
            kept.append("")
        elif opening:
            fence = opening.group(1)
            kept.append("")
        else:
            kept.append(line)
    return _CODE_SPAN.sub(lambda m: "\n" * m.group(0).count("\n"), "\n".join(kept))


def slug(heading: str) -> str:
    """GitHub's id for a heading's Markdown text: its rendered text (code, emphasis and link
    markup dropped), lowercased, punctuation but ``-`` and ``_`` removed, spaces hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"[`*]", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The ids a Markdown file's headings (and explicit ``<a name>``\\s) get on GitHub."""
    seen: dict[str, int] = {}
    ids = set(_HTML_ANCHOR.findall(text))
    for line in without_code(text).split("\n"):
        heading = _HEADING.match(line)
        if heading is None:
            continue
        base = slug(heading.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        ids.add(base if count == 0 else f"{base}-{count}")
    return ids


def links(text: str) -> list[tuple[int, str]]:
    """Each link target in Markdown ``text`` with the line it starts on."""
    plain = without_code(text)
    found = [*_INLINE_LINK.finditer(plain), *_REFERENCE_DEFINITION.finditer(plain)]
    return sorted((plain.count("\n", 0, m.start()) + 1, m.group(1)) for m in found)


def broken_links(path: Path, root: Path) -> list[str]:
    """What is wrong with each relative link of ``path``: a file that is not there (or lies
    outside ``root``), or an anchor no heading of the target has."""
    problems = []
    for line, target in links(path.read_text(encoding="utf-8")):
        if _SCHEME.match(target) or target.startswith("//"):
            continue
        where, _, anchor = unquote(target).partition("#")
        base = root if where.startswith("/") else path.parent
        resolved = (base / where.lstrip("/")).resolve() if where else path
        problem = _problem(resolved, anchor, root)
        if problem:
            problems.append(f"{path.relative_to(root)}:{line}: {target}: {problem}")
    return problems


def _problem(resolved: Path, anchor: str, root: Path) -> str | None:
    if not resolved.is_relative_to(root.resolve()):
        return "outside the repository"
    if not resolved.exists():
        return "no such file"
    if resolved.is_dir():
        resolved = resolved / "README.md"
    if not anchor or resolved.suffix != ".md":
        return None  # a line anchor on a source file (#L10) is GitHub's, not a heading
    if not resolved.exists() or anchor not in anchors(resolved.read_text(encoding="utf-8")):
        return f"no heading #{anchor} in {resolved.relative_to(root.resolve())}"
    return None


MARKDOWN = tracked_markdown(ROOT)


def test_the_readme_and_the_docs_are_checked() -> None:
    """A listing that found nothing would pass every file it did not find."""
    names = {path.relative_to(ROOT).as_posix() for path in MARKDOWN}
    assert {"README.md", "docs/deployment.md", "deploy/README.md"} <= names, names


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(path: Path) -> None:
    assert broken_links(path, ROOT) == []


@pytest.mark.parametrize(
    ("heading", "expected"),
    [
        (
            "Finding categories (the alert API; these names never change)",
            "finding-categories-the-alert-api-these-names-never-change",
        ),
        ("Where the server's extra time goes", "where-the-servers-extra-time-goes"),
        (
            "OTel contrib openai-agents-v2 0.1.0 (content capture `span_and_event`)",
            "otel-contrib-openai-agents-v2-010-content-capture-span_and_event",
        ),
        (
            "Runs H\u2013P (2026-12-03 and 04, Intel Xeon VM)",
            "runs-hp-2026-12-03-and-04-intel-xeon-vm",
        ),
        ("LangChain 1 / LangGraph (`create_agent`)", "langchain-1--langgraph-create_agent"),
        ("**Bold** and [a link](x.md)", "bold-and-a-link"),
    ],
)
def test_a_heading_gets_githubs_id(heading: str, expected: str) -> None:
    assert slug(heading) == expected


def test_a_missing_file_a_missing_anchor_and_a_code_sample_are_told_apart(tmp_path: Path) -> None:
    """The checker itself: each broken link is reported with its line, repeated headings take
    their suffixes, and a link written inside code is not a link."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# Page\n\n## Memory\n\n## Memory\n")
    (tmp_path / "README.md").write_text(
        "# Top\n\n"
        "[ok](docs/page.md#memory-1) [a\nsection](#top) [another\nsection](#no-such-heading)\n"
        "[gone](docs/missing.md) [no heading](docs/page.md#memory-2)\n"
        "`[code](nowhere.md)`\n\n```\n[fenced](nowhere.md)\n```\n"
        "[web](https://example.com/x.md) [out](../elsewhere.md)\n"
    )
    assert broken_links(tmp_path / "README.md", tmp_path) == [
        "README.md:4: #no-such-heading: no heading #no-such-heading in README.md",
        "README.md:6: docs/missing.md: no such file",
        "README.md:6: docs/page.md#memory-2: no heading #memory-2 in docs/page.md",
        "README.md:12: ../elsewhere.md: outside the repository",
    ]
