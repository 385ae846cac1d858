"""The node tree ``YamlLoader`` composes stays as the file wrote it, aliases and merge keys
too (``yaml_tree``), while what it constructs is what PyYAML constructs."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from toolwatch.yaml_tree import AliasNode, YamlLoader, line_and_column, mapping_pairs, node_at


def composed(text: str) -> tuple[yaml.Node, Any]:
    """``text``'s tree, as composed, and its value, constructed from that tree."""
    loader = YamlLoader(text)
    try:
        root = loader.get_single_node()
        assert root is not None
        return root, loader.construct_document(root)
    finally:
        loader.dispose()


def at(text: str, *loc: int | str, key: bool = False) -> str:
    """Where ``node_at`` locates ``loc`` in ``text``, as errors say it."""
    root, _ = composed(text)
    node = node_at(root, loc, key=key)
    assert node is not None
    return line_and_column(node)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: &x [1, 2]\nb: *x\n", {"a": [1, 2], "b": [1, 2]}),
        ("base: &b {x: 1, y: 2}\nm:\n  <<: *b\n  y: 3\n", {"x": 1, "y": 3}),
        (
            "a: &a {p: 1, name: A}\nb: &b {p: 2, q: 2, name: B}\nm: {<<: [*a, *b], r: 3}\n",
            {"p": 1, "q": 2, "name": "A", "r": 3},
        ),
        ("a: &a {p: 1, <<: {z: 9}}\nm: {<<: *a, r: 1}\n", {"z": 9, "p": 1, "r": 1}),
        ("m: {<<: [{name: A}, {name: B, q: 3}], <<: {q: 4}}\n", {"name": "A", "q": 4}),
        ("s: &s text\nm: {list: [*s, *s], *s : 1}\n", {"list": ["text", "text"], "text": 1}),
    ],
)
def test_merges_and_aliases_are_constructed_as_yaml_defines_them(
    text: str, expected: dict[str, Any]
) -> None:
    """Merges are read from ``mapping_pairs``, not spliced into the tree; the value, and its
    keys' order, are PyYAML's all the same, but where a list of merged mappings share a
    key: the first wins, as YAML's merge type says and PyYAML did to 6.0.2 (6.0.4 lets the
    last win, for a key of more than one character)."""
    _, value = composed(text)
    assert json.dumps(value.get("m", value)) == json.dumps(expected)


def test_an_anchored_value_is_one_object_wherever_it_is_named() -> None:
    _, value = composed("a: &x [1, 2]\nb: *x\n")
    assert value["a"] is value["b"]
    _, recursive = composed("&r [1, *r]\n")
    assert recursive[1] is recursive


def test_construction_leaves_the_tree_as_written() -> None:
    """PyYAML's constructor deletes the ``<<`` pair and splices the merged pairs in."""
    root, _ = composed("base: &b {x: 1}\nm: {<<: *b, y: 2}\n")
    _, m = root.value[1]
    assert [key.value for key, _ in m.value] == ["<<", "y"]
    assert isinstance(m.value[0][1], AliasNode)
    assert [key.value for key, _ in mapping_pairs(m)] == ["x", "y"]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("m: {<<: 1}\n", "expected a mapping or list of mappings for merging, but found scalar"),
        ("m: {<<: [1]}\n", "expected a mapping for merging, but found scalar"),
        ("s: &s 1\nm: {<<: *s}\n", "expected a mapping or list of mappings for merging"),
    ],
)
def test_a_merge_of_no_mapping_is_refused_as_pyyaml_refuses_it(text: str, error: str) -> None:
    with pytest.raises(yaml.constructor.ConstructorError, match=error):
        yaml.safe_load(text)
    with pytest.raises(yaml.constructor.ConstructorError, match=error):
        composed(text)


def test_a_value_an_alias_gave_is_at_the_alias() -> None:
    """Was: at the anchor, another setting's place (``a``'s 500)."""
    text = "a:\n  x: &v 500\nb:\n  y: *v\n"
    assert at(text, "b", "y") == "(line 4, column 6)"
    assert at(text, "b", "y", key=True) == "(line 4, column 3)"


def test_what_lies_within_an_aliased_mapping_is_at_the_alias() -> None:
    text = "a: &s\n  x: 1\nb: *s\n"
    assert at(text, "b", "x") == "(line 3, column 4)"
    assert at(text, "b", "x", key=True) == "(line 3, column 4)"
    assert at(text, "a", "x") == "(line 2, column 6)"  # the anchor's own


def test_a_pair_a_merge_brought_through_an_alias_is_at_the_alias() -> None:
    """The merged pair was written in ``base``: its place is another section's."""
    text = "base: &b\n  x: 1\nm:\n  <<: *b\n  y: 2\n"
    assert at(text, "m", "x") == "(line 4, column 7)"
    assert at(text, "m", "x", key=True) == "(line 4, column 7)"
    assert at(text, "m", "y") == "(line 5, column 6)"


def test_a_key_written_beside_a_merge_is_the_pair_the_mapping_keeps() -> None:
    """Was: the merged pair, which PyYAML splices in first."""
    text = "m:\n  <<: {x: 1}\n  x: -1\n"
    assert at(text, "m", "x") == "(line 3, column 6)"
    assert at(text, "m", "x", key=True) == "(line 3, column 3)"


def test_a_merge_written_in_place_is_located_in_it() -> None:
    """Of a list of merged mappings, the first that has the key wins."""
    text = "m:\n  <<: [{x: 1}, {x: 2, y: 3}]\n"
    assert at(text, "m", "x") == "(line 2, column 12)"
    assert at(text, "m", "y") == "(line 2, column 26)"
