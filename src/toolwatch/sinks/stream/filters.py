"""Which findings a stream subscriber wants (``StreamFilter``), and what filters read of a
finding (``tag_of``): its category, its severity, and a digest of each agent it concerns.

Sizes. What a sender names (an agent or a tool, each an attribute of up to
``ingest.max_value_bytes``) reaches every held finding, queue and index entry, so none keeps
it whole (``toolwatch.sinks.stream.messages``): filters match a fixed-size digest of each
agent's case-folded name (``agent_key``), exact however long the name; and a reload redacts
the findings held and queued again by a digest of each one's whole tool name
(``_tool_key``), as ``show_fields`` names tools whole.

Threading: immutable values and pure functions; any thread.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Final, TypeVar

from toolwatch._proto.toolwatch.v1 import findings_pb2
from toolwatch.evaluation.severity import CALL_AGENT
from toolwatch.model import Category, Severity
from toolwatch.model_evaluation import Finding

__all__ = ["StreamFilter", "agent_key"]


#: What filters read of a finding: its category, its severity, and the ``agent_key`` of each
#: agent it concerns (the run's, then the agent that made its call when another: a subscriber
#: for the agent used as a tool follows its calls in every run).
_Tag = tuple[Category, Severity, tuple[bytes, ...]]


#: Bytes of an ``agent_key``: a false match is one in 2**64 a comparison.
_AGENT_KEY_BYTES: Final = 8
#: Bytes of a ``_tool_key``: a false match would show a value ``show_fields`` names of another
#: tool, so one in 2**128 a comparison.
_TOOL_KEY_BYTES: Final = 16


def agent_key(name: str) -> bytes:
    """What the stream keeps of an agent's name to match filters on: a BLAKE2b digest of it
    case-folded, ``_AGENT_KEY_BYTES`` long whatever the name's length (``Refund-Bot`` and
    ``refund-bot`` have one key)."""
    folded = name.casefold().encode("utf-8", "surrogatepass")
    return hashlib.blake2b(folded, digest_size=_AGENT_KEY_BYTES).digest()


def _tool_key(name: str) -> bytes:
    """What the stream keeps of a finding's tool name to redact it again on a reload: a
    BLAKE2b digest of the name whole (not case-folded, as ``show_fields`` matches it),
    ``_TOOL_KEY_BYTES`` long whatever the name's length."""
    whole = name.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(whole, digest_size=_TOOL_KEY_BYTES).digest()


@dataclass(frozen=True, slots=True)
class StreamFilter:
    """Which findings a subscriber wants. Empty ``categories``/``agents`` mean "all";
    ``agents`` holds the names case-folded (``Refund-Bot`` follows ``refund-bot``), and
    ``agent_keys`` their ``agent_key``, what a finding's tag is matched on."""

    categories: frozenset[Category] = frozenset()
    min_severity: Severity = Severity.LOW
    agents: frozenset[str] = frozenset()
    missed_after: bool = False  # the subscriber reads Finding.missed_after
    agent_keys: frozenset[bytes] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "agent_keys", frozenset(map(agent_key, self.agents)))

    @classmethod
    def from_request(cls, request: findings_pb2.SubscribeRequest) -> StreamFilter:
        """The filter a ``SubscribeRequest`` asks for. Category and severity names are
        case-insensitive. Raises ``ValueError`` naming an unknown one."""
        return cls(
            categories=frozenset(_parse(Category, c.upper()) for c in request.categories),
            min_severity=_parse(Severity, (request.min_severity or "low").lower()),
            agents=frozenset(agent.casefold() for agent in request.agents),
            missed_after=request.missed_after,
        )

    @property
    def passes_all(self) -> bool:
        """Whether every finding passes (no category, severity or agent asked for)."""
        return not self.categories and self.min_severity is Severity.LOW and not self.agents

    def matches(self, finding: Finding, agent: str | None) -> bool:
        """Whether ``finding`` (of a run by ``agent``) passes this filter."""
        return self.accepts(tag_of(finding, agent))

    def accepts(self, tag: _Tag) -> bool:
        """Whether a finding of this category, severity and agents passes this filter."""
        category, severity, keys = tag
        return (
            (not self.categories or category in self.categories)
            and severity.rank >= self.min_severity.rank
            and (not self.agents or any(key in self.agent_keys for key in keys))
        )


def tag_of(finding: Finding, run_agent: str | None) -> _Tag:
    """The tag filters read of ``finding``, of a run by ``run_agent``: no name in it, so
    what it keeps is the same size whatever the names."""
    agent = finding.agent or run_agent
    called = finding.details.get(CALL_AGENT)
    agents: tuple[str, ...] = (agent,) if agent is not None else ()
    if isinstance(called, str) and called != agent:
        agents += (called,)
    return finding.category, finding.severity, tuple(map(agent_key, agents))


_Name = TypeVar("_Name", Category, Severity)


def _parse(kind: type[_Name], name: str) -> _Name:
    try:
        return kind(name)
    except ValueError:
        known = ", ".join(m.value for m in kind)
        message = f"unknown {kind.__name__.lower()} {name!r}; expected one of: {known}"
        raise ValueError(message) from None
