"""docs/development.md's source tree names every module of ``src/toolwatch``, each in the
section of its directory, so that whoever looks for where a thing lives finds it there.

Modules get split and added (``evaluation/settings.py`` into four, once) and the map lags
silently: a newcomer reading it never learns the module exists. The map names the evaluators
as "one module per evaluator", so those are taken as named.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "toolwatch"
DEVELOPMENT = ROOT / "docs" / "development.md"

# "evaluation/   one module per evaluator": the modules named by the evaluator they hold.
EVALUATORS = {
    "arguments.py",
    "composite.py",
    "invariants.py",
    "loops.py",
    "order.py",
    "safety.py",
    "selection.py",
    "structure.py",
}
# Generated code and package plumbing, which no reader looks up.
SKIPPED_DIRECTORIES = {"_proto"}
SKIPPED_FILES = {"__init__.py", "__main__.py"}

_SECTION = re.compile(r"^  (\w+)/ ", re.MULTILINE)


def module_map() -> dict[str, str]:
    """The map's text by section: ``""`` for the top-level modules, else the directory's name
    (``"sinks"``: its line and the indented lines under it, subdirectories included)."""
    text = DEVELOPMENT.read_text(encoding="utf-8")
    start = text.index("src/toolwatch/\n")
    block = text[start : text.index("\ntests/unit/", start)]
    sections: dict[str, str] = {}
    bounds = [(m.start(), m.group(1)) for m in _SECTION.finditer(block)]
    sections[""] = block[: bounds[0][0]] if bounds else block
    for (begin, name), (end, _) in zip(bounds, [*bounds[1:], (len(block), "")], strict=True):
        sections[name] = block[begin:end]
    return sections


def unnamed_modules() -> list[str]:
    """Each module of the package whose name (and subdirectory's) is not in its section."""
    sections = module_map()
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).parts
        if path.name in SKIPPED_FILES or SKIPPED_DIRECTORIES & set(parts):
            continue
        if parts[0] == "evaluation" and path.name in EVALUATORS:
            continue
        text = sections.get(parts[0] if len(parts) > 1 else "", "")
        names = [f"{part}/" for part in parts[1:-1]] + [path.name]
        if not all(re.search(rf"(?<![\w/]){re.escape(name)}", text) for name in names):
            missing.append("/".join(parts))
    return missing


def test_the_development_module_map_names_every_module_in_its_directory() -> None:
    assert unnamed_modules() == []


def test_a_module_named_only_in_another_directory_counts_as_unnamed() -> None:
    sections = module_map()
    # outputs.py is both a top-level module and an assembly step, each in its own section.
    assert re.search(r"(?<![\w/])outputs\.py", sections[""])
    assert re.search(r"(?<![\w/])outputs\.py", sections["assembly"])
    assert "scan.py" in sections["ingest"]
    assert "scan.py" not in sections[""], "the check would pass a module named elsewhere"
