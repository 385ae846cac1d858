"""Tool names as the evaluation settings write them: ``ToolName``, ``tool.field``
references (``split_tool_field``), and the refusal of two names that normalize alike
(``refuse_one_name_twice``). Shared by the policy, its invariants and the evaluators'
settings; plain functions, no pydantic models."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Annotated

from pydantic import StringConstraints

from toolwatch.names import fold

__all__ = ["AS_CALLS", "ToolName", "refuse_one_name_twice", "split_tool_field"]

ToolName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


def split_tool_field(
    ref: str, is_tool: Callable[[str], bool] | None = None, listed: str = ""
) -> tuple[str, str]:
    """Split ``tool.field``. A tool's name may hold dots itself (``billing.issue_refund``:
    ``.`` is one of the namespace separators ``names`` recognises) and a field may be a
    dotted path into nested arguments (``create_order.customer.id``; a part in digits indexes
    an array, ``issue_refund.items.0.order_id``), so with ``is_tool``
    the tool is the longest dotted prefix it accepts (``billing.issue_refund.order_id``:
    ``billing.issue_refund``'s ``order_id`` when that is a tool, else ``billing``'s
    ``issue_refund.order_id``). Without ``is_tool`` (the form alone) the cut is at the first
    dot. Raises ``ValueError`` naming the value: not ``tool.field``, or no prefix of it
    a tool ``is_tool`` accepts (``listed`` says where those are)."""
    tool, dot, field = ref.partition(".")
    if not dot or not tool.strip() or not field.strip():
        raise ValueError(f"{ref!r} is not of the form tool.field")
    if is_tool is None:
        return tool.strip(), field.strip()
    tried: list[str] = []
    cut = ref.rfind(".")
    while cut > 0:
        tool, field = ref[:cut].strip(), ref[cut + 1 :].strip()
        if tool and field:
            if is_tool(tool):
                return tool, field
            tried.append(tool)
        cut = ref.rfind(".", 0, cut)
    if len(tried) == 1:
        raise ValueError(f"tool {tried[0]!r} is not in {listed}")
    shown = ", ".join(repr(t) for t in reversed(tried))
    raise ValueError(f"none of {shown} (the tool it starts with, then a field) is in {listed}")


#: How names are compared where the policy's normalizer compares them, as refusals say it.
AS_CALLS = (
    "tool names are compared as calls' are (trimmed, case-folded, tool_prefix removed, aliased)"
)


def refuse_one_name_twice(
    names: Iterable[str],
    what: str,
    noun: str,
    same: Callable[[str], Hashable] = fold,
    compared: str = "names are compared trimmed and case-folded",
) -> None:
    """Refuse two of ``names`` that ``same`` makes one ``noun``: what is keyed by them would
    keep one and silently drop the other. Raises ``ValueError`` naming both as written, as
    ``what`` ("agents") and saying how they are ``compared``."""
    seen: dict[Hashable, str] = {}
    for name in names:
        other = seen.setdefault(same(name), name)
        if other != name:
            raise ValueError(f"{what} {other!r} and {name!r} are one {noun}: {compared}")
