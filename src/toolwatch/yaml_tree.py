"""How toolwatch reads its YAML files (the configuration, golden cases): ``YamlLoader``, the
node tree it composes, kept as written, and the places in that tree errors name.

``YamlLoader`` refuses a key given twice in one mapping: PyYAML keeps the last silently, so
a second ``security:`` block would drop the first's settings. And it reads plain scalars as
YAML 1.2 does, not as PyYAML's YAML 1.1: ``yes``, ``no``, ``on`` and ``off`` are text (a
tool named ``on``, ``enum: [NO]``, Norway), as are ``14:30`` (base 60: 870), ``007`` and
``01234`` (octal), ``0x1F``, ``1_000`` and unquoted dates; ``1.10`` is not 1.1 where a
string is wanted. Numbers are JSON's, with an optional sign and ``.inf``/``.nan``. (What
YAML 1.1 read otherwise is looked for by ``sections.yaml11_booleans`` and
``yaml11_numbers``.)

PyYAML's composer puts the anchored node itself where an alias (``*age``) is written, and
its constructor splices the pairs a merge key brings (``<<: *defaults``) into the mapping
node, in place: a value an alias or a merge gave was then found where its anchor was
written, another setting's place (another section, another case), and a key written beside
``<<`` at the merged pair's place. ``YamlLoader`` composes each alias as an ``AliasNode`` at
the alias's own place (construction reads its anchor instead) and constructs a mapping from
``mapping_pairs``, which leaves the tree as written:

- ``mapping_pairs``: the pairs a mapping holds, merges included, as YAML defines them;
- ``node_at``: where an error's location (mapping keys and list indices) was written;
- ``line_and_column``: a node's place, as errors say it.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from typing import Any, Final

import yaml
from yaml.constructor import ConstructorError
from yaml.error import Mark

__all__ = [
    "AliasNode",
    "YamlLoader",
    "anchored",
    "line_and_column",
    "mapping_pairs",
    "node_at",
]

_MERGE = "tag:yaml.org,2002:merge"

#: A pair of a mapping node, and the alias that merged it in, if one did.
_Pair = tuple[yaml.Node, yaml.Node, "AliasNode | None"]


class AliasNode(yaml.Node):
    """An alias (``*name``) at the place it is written; ``anchored`` is the node its anchor
    names, which construction reads in its place (one object wherever it is named, as
    PyYAML's composer makes it)."""

    id = "alias"

    def __init__(self, anchored: yaml.Node, start_mark: Mark, end_mark: Mark) -> None:
        super().__init__(anchored.tag, anchored.value, start_mark, end_mark)
        self.anchored = anchored


def anchored(node: yaml.Node) -> yaml.Node:
    """The node ``node`` stands for: an alias's anchored node, else itself."""
    return node.anchored if isinstance(node, AliasNode) else node


def mapping_pairs(mapping: yaml.MappingNode) -> list[tuple[yaml.Node, yaml.Node]]:
    """The pairs of ``mapping``, merges included, as YAML's merge key type defines them
    (yaml.org/type/merge) and PyYAML read them to 6.0.2: the pairs its merge keys bring
    (``<<``: a mapping, or a list of them, of which the first with a key wins), then its
    own; the mapping keeps a key's last pair. (PyYAML 6.0.4 lets the last of a list win,
    for a key of more than one character.) Raises ``ConstructorError`` where PyYAML does,
    for a merge of anything else."""
    return [(key, value) for key, value, _ in _sourced_pairs(mapping, None)]


def _sourced_pairs(mapping: yaml.MappingNode, via: AliasNode | None) -> list[_Pair]:
    """``mapping_pairs``, each with the alias that merged it in (``via``, or the first on
    the way to it)."""
    merged: list[_Pair] = []
    own: list[_Pair] = []
    for key, value in mapping.value:
        if anchored(key).tag != _MERGE:
            own.append((key, value, via))
            continue
        for source, alias in reversed(_merged(mapping, value)):
            merged += _sourced_pairs(source, via or alias)
    return merged + own


def _merged(
    mapping: yaml.MappingNode, value: yaml.Node
) -> list[tuple[yaml.MappingNode, AliasNode | None]]:
    """The mappings a merge key's ``value`` brings into ``mapping``, in the order written,
    each with the alias that named it, if one did."""
    alias = value if isinstance(value, AliasNode) else None
    named = anchored(value)
    if isinstance(named, yaml.MappingNode):
        return [(named, alias)]
    if not isinstance(named, yaml.SequenceNode):
        raise _unmergeable(mapping, named, "a mapping or list of mappings")
    sources = []
    for item in named.value:
        source = anchored(item)
        if not isinstance(source, yaml.MappingNode):
            raise _unmergeable(mapping, source, "a mapping")
        sources.append((source, alias or (item if isinstance(item, AliasNode) else None)))
    return sources


def _unmergeable(mapping: yaml.MappingNode, found: yaml.Node, expected: str) -> ConstructorError:
    """PyYAML's error for a merge of ``found``, not ``expected``."""
    return ConstructorError(
        "while constructing a mapping",
        mapping.start_mark,
        f"expected {expected} for merging, but found {getattr(found, 'id', 'a node')}",
        found.start_mark,
    )


def node_at(
    root: yaml.Node | None, loc: Sequence[int | str], *, key: bool = False
) -> yaml.Node | None:
    """Where ``loc`` (a validation error's: mapping keys and list indices) was written in
    ``root`` (a tree ``YamlLoader`` composed): the deepest node along it (a missing field
    stops at its parent); with ``key``, the mapping key that node is written under (the node
    itself when it has none: a list's item, the root). A value an alias gave is at the
    alias, and so is what lies within it and a pair a merge brought through it, key and
    value: the anchor is another setting's place. Of a key written twice (beside ``<<``),
    the pair the mapping keeps, the last. A step naming a tagged union's option, which
    pydantic puts in ``loc`` (``forbidden`` in ``invariants.0.forbidden.tool``), is the
    value of one of the mapping's keys (``kind: forbidden``): it is stepped over."""
    node, written_under = root, None
    for part in loc:
        if _names_option(node, part):
            continue  # the same mapping
        step = _step(node, part)
        if step is None:
            if isinstance(node, AliasNode):
                return node  # what is within was written at the anchor
            break
        written_under, node = step
    return written_under if key and written_under is not None else node


def _names_option(node: yaml.Node | None, part: int | str) -> bool:
    """Whether ``part`` names the option of a tagged union that ``node`` is: the value of
    one of its keys (``kind: forbidden``), where it has no key ``part``."""
    if not isinstance(node, yaml.MappingNode) or _kept_pair(node, str(part)) is not None:
        return False
    return any(value.value == part for _, value in mapping_pairs(node))


def _step(node: yaml.Node | None, part: int | str) -> tuple[yaml.Node | None, yaml.Node] | None:
    """The key (if any) and the node ``part`` leads to from ``node``; ``None`` where the
    file wrote nothing there, or, in a scalar or an alias, what is there was written
    elsewhere."""
    if isinstance(node, yaml.MappingNode):
        return _kept_pair(node, str(part))
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int):
        return (None, node.value[part]) if 0 <= part < len(node.value) else None
    return None


def _kept_pair(mapping: yaml.MappingNode, key: str) -> tuple[yaml.Node, yaml.Node] | None:
    """The pair whose value ``mapping`` keeps for ``key`` (the last), as written: one that a
    merge brought through an alias is that alias, as key and value."""
    for key_node, value, alias in reversed(_sourced_pairs(mapping, None)):
        if key_node.value == key:
            return (key_node, value) if alias is None else (alias, alias)
    return None


def line_and_column(node: yaml.Node) -> str:
    """Where ``node`` starts, as errors say it: ``(line 3, column 5)``, counted from 1."""
    mark = node.start_mark
    return f"(line {mark.line + 1}, column {mark.column + 1})"


class YamlLoader(yaml.SafeLoader):
    """``SafeLoader`` that rejects duplicate mapping keys (PyYAML silently keeps the last),
    reads plain scalars as YAML 1.2 does (the module's docstring; the resolvers below), and
    keeps the node tree as written, for the places errors name (``node_at``): an alias is
    an ``AliasNode`` at its own place, and merges are not spliced into the tree. What it
    constructs is what PyYAML did to 6.0.2 (``mapping_pairs``): an anchored value is one
    object wherever it is named, and of a list of merged mappings the first with a key wins."""

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if not self.check_event(yaml.AliasEvent):
            return super().compose_node(parent, index)
        alias = self.peek_event()  # type: ignore[no-untyped-call]
        named = super().compose_node(parent, index)  # the anchored node, or an unknown alias
        assert named is not None  # an alias names a node composed already
        return AliasNode(named, alias.start_mark, alias.end_mark)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        return super().construct_object(anchored(node), deep=deep)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        _refuse_duplicate_keys(node)
        merged = yaml.MappingNode(node.tag, mapping_pairs(node), node.start_mark, node.end_mark)
        # Not SafeConstructor's, which would splice the merges into ``node`` itself.
        return yaml.constructor.BaseConstructor.construct_mapping(self, merged, deep=deep)


def _refuse_duplicate_keys(node: yaml.MappingNode) -> None:
    """Raises for a key ``node`` holds twice, ``<<`` aside (PyYAML reads each merge)."""
    seen: set[tuple[str, str]] = set()
    for key_node in (anchored(key) for key, _ in node.value):
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
            continue
        key = (key_node.tag, key_node.value)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key {key_node.value!r}",
                key_node.start_mark,
            )
        seen.add(key)


# YAML 1.2's core schema, with JSON's numbers: a plain value is read as the JSON value it
# spells (null, a boolean written true or false, a number), else as text. So what YAML 1.1
# retypes stays as written: dates (a ``datetime.date`` would equal no string a call sends),
# ``14:30``, ``01234``, ``0x1F``, ``1_000``, and ``=`` (YAML 1.1's "value" key). A sign
# (``+5``) and ``.inf``/``.nan`` are YAML's (the sections refuse the last two).
_PLAIN: Final = (
    (
        "tag:yaml.org,2002:bool",
        re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
        "tTfF",
    ),
    (
        "tag:yaml.org,2002:int",
        re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$"),
        "-+0123456789",
    ),
    (
        "tag:yaml.org,2002:float",
        re.compile(
            r"^(?:[-+]?(?:0|[1-9][0-9]*)(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?"
            r"|[-+]?\.[0-9]+(?:[eE][-+]?[0-9]+)?"
            r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
        ),
        "-+.0123456789",
    ),
)
YamlLoader.yaml_implicit_resolvers = {
    first: [
        (tag, regexp)
        for tag, regexp in resolvers
        if tag.endswith((":null", ":merge"))  # YAML 1.1's and 1.2's alike
    ]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
for _tag, _regexp, _firsts in _PLAIN:
    YamlLoader.add_implicit_resolver(_tag, _regexp, list(_firsts))
