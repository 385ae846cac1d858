"""The compiled hot path (``toolwatch.compiled``, ``toolwatch.compiled_state``): what is
compiled, what runs, and the switch back to the source."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from toolwatch import compiled, compiled_state

PACKAGE = Path(compiled.__file__).parent

_REPORT = (
    "import json; from toolwatch import compiled_state; s = compiled_state.state(); "
    "print(json.dumps({'compiled': s.compiled, 'source': s.source, 'describe': s.describe()}))"
)


def _state_in_child(**env: str) -> dict[str, object]:
    run = subprocess.run(
        [sys.executable, "-c", _REPORT],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    report: dict[str, object] = json.loads(run.stdout)
    return report


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("relative", compiled.MODULES)
def test_each_listed_module_exists_and_defines_no_pydantic_model(relative: str) -> None:
    """mypyc cannot compile a pydantic model; the list must name real files (the Makefile
    rebuilds when they change)."""
    path = PACKAGE / relative
    assert path.is_file(), path
    assert not any(name.split(".")[0] == "pydantic" for name in _imports(path)), relative


def _third_party_names(tree: ast.Module) -> set[str]:
    """Names bound by ``from X import Name`` where X is neither toolwatch nor the stdlib."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            top = node.module.split(".")[0]
            if top != "toolwatch" and top not in sys.stdlib_module_names:
                names.update(alias.asname or alias.name for alias in node.names)
    return names


@pytest.mark.parametrize("relative", compiled.MODULES)
def test_no_listed_module_derives_a_class_from_a_third_party_one(relative: str) -> None:
    """The build type-checks without the dependencies installed, so such a base is unknown to
    mypyc, and the class it compiled from one (a prometheus_client ``Collector``) crashed the
    interpreter at its first garbage collection."""
    tree = ast.parse((PACKAGE / relative).read_text(encoding="utf-8"))
    foreign = _third_party_names(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            bases = {ast.unparse(base).split(".")[0] for base in node.bases}
            assert not bases & foreign, f"{relative}: class {node.name}({', '.join(bases)})"


def test_the_switch_runs_every_listed_module_from_its_source() -> None:
    report = _state_in_child(**{compiled.PURE_PYTHON_ENV: "1"})
    assert report["compiled"] == []
    assert len(report["source"]) == len(compiled.MODULES)  # type: ignore[arg-type]
    assert report["describe"] == "pure Python (TOOLWATCH_PURE_PYTHON=1)"


def test_a_build_is_all_compiled_or_all_source_never_half() -> None:
    env = {k: v for k, v in os.environ.items() if k != compiled.PURE_PYTHON_ENV}
    run = subprocess.run(
        [sys.executable, "-c", _REPORT], env=env, capture_output=True, text=True, check=True
    )
    report = json.loads(run.stdout)
    assert {len(report["compiled"]), len(report["source"])} == {0, len(compiled.MODULES)}
    if report["compiled"]:
        count = len(compiled.MODULES)
        assert report["describe"].startswith(f"compiled by mypyc ({count} of {count} modules)")


def test_a_source_edited_after_the_build_is_stale(tmp_path: Path) -> None:
    source, built = tmp_path / "timeline.py", tmp_path / "timeline.so"
    source.write_text("")
    built.write_text("")
    os.utime(source, (1_000, 1_000))
    os.utime(built, (2_000, 2_000))
    assert not compiled_state.is_stale(source, built)
    os.utime(source, (3_000, 3_000))
    assert compiled_state.is_stale(source, built)


def test_only_a_source_tree_built_in_place_can_be_stale(tmp_path: Path) -> None:
    """In site-packages the files come from one wheel: their times say nothing."""
    assert compiled_state.built_in_place(tmp_path / "src" / "toolwatch")
    assert not compiled_state.built_in_place(Path(sysconfig.get_path("platlib")) / "toolwatch")


def test_an_install_without_the_compiled_modules_says_how_to_build_them() -> None:
    """A checkout installed before gcc was: `make serve` does not rebuild it once gcc is there
    (its stamp is newer than the sources), so start-up must say what does."""
    state = compiled_state.CompiledState((), ("toolwatch.names",), ())
    assert state.describe() == (
        "pure Python (not compiled at install; reinstall with a C compiler and Python's headers,"
        " without TOOLWATCH_PURE_PYTHON=1: in a checkout, `make clean`, then `make serve`)"
    )


def test_a_stale_module_is_named_in_the_description() -> None:
    state = compiled_state.CompiledState(("toolwatch.names",), (), ("toolwatch.names",))
    assert state.describe().endswith(
        "; older than their source, rebuild with `make`: toolwatch.names"
    )


#: Constants tests replace with ``monkeypatch``: a ``Final`` one is inlined by mypyc, so
#: compiled code would not see the test's value.
_PATCHED_BY_TESTS = {"_MAX_ADOPTION_CHECKS", "_C_MAKE_ENCODER"}
_CONSTANT = re.compile(r"_?[A-Z][A-Z0-9_]*")


def _unfinal_constants(tree: ast.Module) -> list[str]:
    found = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, annotation = node.targets[0], None
        elif isinstance(node, ast.AnnAssign):
            target, annotation = node.target, node.annotation
        else:
            continue
        if not isinstance(target, ast.Name) or not _CONSTANT.fullmatch(target.id):
            continue
        if ast.unparse(node.value or ast.Constant(None)).startswith("TypeVar("):
            continue
        if _floats(node.value):  # mypyc 2.4 reads a Final tuple of floats back as unset
            continue
        if annotation is None or "Final" not in ast.unparse(annotation):
            found.append(target.id)
    return sorted(set(found) - _PATCHED_BY_TESTS)


def _floats(value: ast.expr | None) -> bool:
    """A tuple of float literals (spliced tuples included)."""
    if not isinstance(value, ast.Tuple):
        return False
    items = [i.value if isinstance(i, ast.Starred) else i for i in value.elts]
    return all(
        _floats(i)
        if isinstance(i, ast.Tuple)
        else isinstance(i, ast.Constant) and type(i.value) is float
        for i in items
    )


@pytest.mark.parametrize("relative", compiled.MODULES)
def test_a_listed_module_declares_its_constants_final(relative: str) -> None:
    """Compiled code reads a module constant that is not ``Final`` from the module's dict,
    by name, on every read (about 70 instructions; the argument parser's depth limit was read
    for every argument and result); a ``Final`` one is inlined or kept in a C static."""
    tree = ast.parse((PACKAGE / relative).read_text(encoding="utf-8"))
    assert _unfinal_constants(tree) == [], relative


def test_the_constants_check_sees_an_unannotated_and_an_annotated_constant() -> None:
    tree = ast.parse(
        "from typing import Final, TypeVar\n"
        "K = TypeVar('K')\nA = 1\n_B: int = 2\nC: Final = 3\n_D: Final[int] = 4\nname = 5\n"
        "BUCKETS = (0.5, *(1.0, 2.0))\nMIXED = (0.5, 1)\n"
    )
    assert _unfinal_constants(tree) == ["A", "MIXED", "_B"]
