"""``sections.changed_keys``: the settings a reload names when it does not apply them."""

from __future__ import annotations

from pydantic import Field

from toolwatch.sections import Section, changed_keys


class Inner(Section):
    size: int = 1
    names: tuple[str, ...] = ()


class Outer(Section):
    inner: Inner = Inner()
    optional: Inner | None = None
    aliased: int = Field(0, alias="spelled")
    rate: float = 0.5


def test_equal_sections_change_nothing() -> None:
    assert changed_keys("outer", Outer(), Outer()) == []


def test_a_nested_setting_is_named_by_its_whole_key() -> None:
    new = Outer(inner=Inner(size=2), rate=0.25)
    assert changed_keys("outer", new, Outer()) == ["outer.inner.size", "outer.rate"]


def test_a_setting_is_named_as_a_file_spells_it() -> None:
    assert changed_keys("outer", Outer(spelled=3), Outer()) == ["outer.spelled"]


def test_a_list_or_a_section_turned_on_is_named_whole() -> None:
    new = Outer(inner=Inner(names=("a",)), optional=Inner())
    assert changed_keys("outer", new, Outer()) == ["outer.inner.names", "outer.optional"]


def test_a_setting_of_no_section_is_named_alone() -> None:
    assert changed_keys("shutdown_grace_seconds", 3.0, 10.0) == ["shutdown_grace_seconds"]
