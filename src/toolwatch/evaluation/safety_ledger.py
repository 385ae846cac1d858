"""The ledger ``safety`` keeps while it reads a run in sequence order: the verification
outcomes seen so far (successes by tool, bound field and value; entities; failures; calls
never run), so that a run of thousands of calls costs one pass, not a scan per dangerous
call. Filled and asked by ``toolwatch.evaluation.safety``; see its docstring for what
verifies what."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from toolwatch.evaluation.base import spanned_tools
from toolwatch.evaluation.concurrency import Concurrency, Successes
from toolwatch.evaluation.entities import (
    RecordingKey,
    entity_key,
    lookup,
    recording_key,
    recording_tools,
    unrecorded,
)
from toolwatch.evaluation.policy_settings import Binding
from toolwatch.model_traces import ToolCall

__all__ = ["ANY", "NO_FIELDS", "EntityKey", "Ledger"]

#: Ledger key of "a successful call of this tool", whatever its arguments.
ANY: Final = ("", "")
#: Ledger key of an entity: (verification tool, its fields, their values; ``None`` for a
#: field the call did not record).
EntityKey = tuple[str, tuple[str, ...], tuple[str | None, ...]]
NO_FIELDS: Final[frozenset[str]] = frozenset()  # a tool with no bound fields


class Ledger:
    """Verification outcomes seen so far in one run: for each (tool, field, value) the
    indexes of the successful calls that carried it, and the span ids of failed calls."""

    __slots__ = (
        "_recording",
        "_spanned",
        "calls",
        "complete",
        "concurrency",
        "entities",
        "failed",
        "failed_unrecorded",
        "failed_values",
        "lost",
        "lost_spans",
        "prior",
        "prior_entities",
        "prior_unrecorded",
        "succeeded",
        "tools",
        "unrecorded",
        "unrun",
    )

    def __init__(
        self,
        concurrency: Concurrency,
        calls: Sequence[ToolCall],
        tools: list[str],
        *,
        complete: bool = True,
    ) -> None:
        self.concurrency = concurrency
        self.calls = calls
        self.tools = tools  # the calls' normalized names
        self.complete = complete  # the run ended: an unfinished one may lack spans still to come
        self.lost_spans = False  # it ended but lost spans (span_limit)
        self._spanned: frozenset[str] | None = None
        self._recording: frozenset[RecordingKey] | None = None
        # tool -> successful calls so far that lost their arguments (``records``): no value
        self.lost: dict[str, int] = {}
        self.succeeded: dict[tuple[str, str, str], Successes] = {}
        # (tool, field) -> successful calls whose arguments were not recorded: any value
        self.unrecorded: dict[tuple[str, str], Successes] = {}
        # What earlier runs of the conversation verified (Reference.earlier): before every
        # call. (tool, field, value) as ``succeeded``'s keys; (tool, field): not recorded.
        self.prior: set[tuple[str, str, str]] = set()
        self.prior_unrecorded: set[tuple[str, str]] = set()
        # (tool, fields, values): successful calls that carried these values together
        # (``Entity``), and those of earlier runs.
        self.entities: dict[EntityKey, Successes] = {}
        self.prior_entities: set[EntityKey] = set()
        self.failed: dict[str, list[str | None]] = {}
        # The indexes of failed calls by (tool, field, value) of a bound field, and by
        # (tool, field) where the call's arguments were not recorded or could not be read
        # (it may have been of any value).
        self.failed_values: dict[tuple[str, str, str], list[int]] = {}
        self.failed_unrecorded: dict[tuple[str, str], list[int]] = {}
        self.unrun: dict[str, int] = {}  # tool -> requested calls that never ran

    def spanned(self, tool: str) -> bool:
        """Whether some call of ``tool`` in the run has a tool span (worked out for all
        tools the first time a span-less verification asks: most runs have none)."""
        if self._spanned is None:
            self._spanned = spanned_tools(self.calls, self.tools)
        return tool in self._spanned

    def records(self, call: ToolCall, tool: str) -> bool:
        """Whether some call of ``tool`` in the run by ``call``'s producer (its service,
        ``entities.producer``) carries arguments (``recording_tools``, worked out the first
        time a verification without arguments asks: most runs have none, or none with)."""
        if self._recording is None:
            self._recording = recording_tools(self.calls, self.tools)
        return recording_key(call, tool) in self._recording

    def add(self, tool: str, field_value: tuple[str, str], index: int) -> None:
        key = (tool, field_value[0], field_value[1])  # not a * splat: generic when compiled
        successes = self.succeeded.get(key)
        if successes is None:
            successes = self.succeeded[key] = self.concurrency.successes()
        successes.add(index)

    def made(self, tool: str, field_value: tuple[str, str]) -> bool:
        """Whether a success of this run was recorded so far, whether it informs or not."""
        return (tool, field_value[0], field_value[1]) in self.succeeded

    def informs(self, tool: str, field_value: tuple[str, str], index: int) -> bool:
        """Whether a recorded (so earlier) success informs the call at ``index``."""
        key = (tool, field_value[0], field_value[1])
        if key in self.prior:
            return True
        successes = self.succeeded.get(key)
        return successes is not None and successes.informs(index)

    def add_entity(self, key: EntityKey, index: int) -> None:
        successes = self.entities.get(key)
        if successes is None:
            successes = self.entities[key] = self.concurrency.successes()
        successes.add(index)

    def informs_entity(self, key: EntityKey, index: int) -> bool:
        """Whether a recorded success that carried the key's values (``None``: one it did not
        record) informs the call at ``index``."""
        if key in self.prior_entities:
            return True
        successes = self.entities.get(key)
        return successes is not None and successes.informs(index)

    def add_unrecorded(self, tool: str, field: str, index: int) -> None:
        key = (tool, field)
        successes = self.unrecorded.get(key)
        if successes is None:
            successes = self.unrecorded[key] = self.concurrency.successes()
        successes.add(index)

    def add_failed(self, tool: str, fields: frozenset[str], index: int) -> None:
        """Enter the failed verification call at ``index``, with its bound ``fields``. Arguments
        that could not be read (``arguments_error``) count as not recorded: unlike a success,
        which must show its value to verify, a failure may have been of any value."""
        call = self.calls[index]
        self.failed.setdefault(tool, []).append(call.span_id)
        unknown = unrecorded(call) or call.arguments_error is not None
        for field in fields:
            if unknown:
                self.failed_unrecorded.setdefault((tool, field), []).append(index)
                continue
            value = entity_key(lookup(call.arguments, field))
            if value is not None:
                self.failed_values.setdefault((tool, field, value), []).append(index)

    def failed_of(self, bindings: list[Binding], value: str) -> Sequence[int]:
        """The failed calls of ``bindings``' tools that may have verified ``value``: those
        whose bound field held it, or whose arguments were not recorded or could not be
        read; in sequence order. Not
        copied when one list holds them (the usual binding): thousands of flagged calls of
        a run may ask."""
        lists: list[list[int]] = []
        for b in bindings:
            tool, field = b.verification_tool, b.verification_field
            of_value = self.failed_values.get((tool, field, value))
            for found in (of_value, self.failed_unrecorded.get((tool, field))):
                if found:
                    lists.append(found)
        if len(lists) < 2:
            return lists[0] if lists else ()
        return sorted({i for found in lists for i in found})  # a call may be in two lists

    def informs_unrecorded(self, tool: str, field: str, index: int) -> bool:
        """Whether an earlier success of ``tool`` whose arguments were not recorded (its
        ``field`` could have held any value) informs the call at ``index``."""
        if (tool, field) in self.prior_unrecorded:
            return True
        successes = self.unrecorded.get((tool, field))
        return successes is not None and successes.informs(index)
