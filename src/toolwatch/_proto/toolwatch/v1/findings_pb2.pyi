from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ToolCall(_message.Message):
    __slots__ = ("tool_name", "raw_name", "arguments_json", "arguments_error", "call_id", "parent_call_id", "sequence_index", "parallel_group", "status", "error_type", "agent", "span_id", "start_time_unix_nano", "end_time_unix_nano")
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    RAW_NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_ERROR_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_INDEX_FIELD_NUMBER: _ClassVar[int]
    PARALLEL_GROUP_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    START_TIME_UNIX_NANO_FIELD_NUMBER: _ClassVar[int]
    END_TIME_UNIX_NANO_FIELD_NUMBER: _ClassVar[int]
    tool_name: str
    raw_name: str
    arguments_json: str
    arguments_error: str
    call_id: str
    parent_call_id: str
    sequence_index: int
    parallel_group: int
    status: str
    error_type: str
    agent: str
    span_id: str
    start_time_unix_nano: int
    end_time_unix_nano: int
    def __init__(self, tool_name: _Optional[str] = ..., raw_name: _Optional[str] = ..., arguments_json: _Optional[str] = ..., arguments_error: _Optional[str] = ..., call_id: _Optional[str] = ..., parent_call_id: _Optional[str] = ..., sequence_index: _Optional[int] = ..., parallel_group: _Optional[int] = ..., status: _Optional[str] = ..., error_type: _Optional[str] = ..., agent: _Optional[str] = ..., span_id: _Optional[str] = ..., start_time_unix_nano: _Optional[int] = ..., end_time_unix_nano: _Optional[int] = ...) -> None: ...

class ToolTrace(_message.Message):
    __slots__ = ("trace_id", "run_span_id", "service", "agent", "model", "calls", "refusal", "refusal_reason", "error_count", "complete", "incomplete_reason", "start_time_unix_nano", "end_time_unix_nano", "span_count", "conversation_id", "reference_keys")
    class ReferenceKeysEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_COUNT_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    INCOMPLETE_REASON_FIELD_NUMBER: _ClassVar[int]
    START_TIME_UNIX_NANO_FIELD_NUMBER: _ClassVar[int]
    END_TIME_UNIX_NANO_FIELD_NUMBER: _ClassVar[int]
    SPAN_COUNT_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_KEYS_FIELD_NUMBER: _ClassVar[int]
    trace_id: str
    run_span_id: str
    service: str
    agent: str
    model: str
    calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    refusal: bool
    refusal_reason: str
    error_count: int
    complete: bool
    incomplete_reason: str
    start_time_unix_nano: int
    end_time_unix_nano: int
    span_count: int
    conversation_id: str
    reference_keys: _containers.ScalarMap[str, str]
    def __init__(self, trace_id: _Optional[str] = ..., run_span_id: _Optional[str] = ..., service: _Optional[str] = ..., agent: _Optional[str] = ..., model: _Optional[str] = ..., calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ..., refusal: _Optional[bool] = ..., refusal_reason: _Optional[str] = ..., error_count: _Optional[int] = ..., complete: _Optional[bool] = ..., incomplete_reason: _Optional[str] = ..., start_time_unix_nano: _Optional[int] = ..., end_time_unix_nano: _Optional[int] = ..., span_count: _Optional[int] = ..., conversation_id: _Optional[str] = ..., reference_keys: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Finding(_message.Message):
    __slots__ = ("category", "severity", "evaluator", "reference", "score", "explanation", "trace_id", "span_id", "tool", "field", "agent", "service", "time_unix_nano", "details", "missed_before", "missed_after", "sequence", "traffic", "case_id", "source_trace_id", "pair_key", "missed_from_replay", "incomplete_reason")
    class DetailsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CATEGORY_FIELD_NUMBER: _ClassVar[int]
    SEVERITY_FIELD_NUMBER: _ClassVar[int]
    EVALUATOR_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    EXPLANATION_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    TIME_UNIX_NANO_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    MISSED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    MISSED_AFTER_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_FIELD_NUMBER: _ClassVar[int]
    CASE_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    PAIR_KEY_FIELD_NUMBER: _ClassVar[int]
    MISSED_FROM_REPLAY_FIELD_NUMBER: _ClassVar[int]
    INCOMPLETE_REASON_FIELD_NUMBER: _ClassVar[int]
    category: str
    severity: str
    evaluator: str
    reference: str
    score: float
    explanation: str
    trace_id: str
    span_id: str
    tool: str
    field: str
    agent: str
    service: str
    time_unix_nano: int
    details: _containers.ScalarMap[str, str]
    missed_before: int
    missed_after: int
    sequence: int
    traffic: str
    case_id: str
    source_trace_id: str
    pair_key: str
    missed_from_replay: int
    incomplete_reason: str
    def __init__(self, category: _Optional[str] = ..., severity: _Optional[str] = ..., evaluator: _Optional[str] = ..., reference: _Optional[str] = ..., score: _Optional[float] = ..., explanation: _Optional[str] = ..., trace_id: _Optional[str] = ..., span_id: _Optional[str] = ..., tool: _Optional[str] = ..., field: _Optional[str] = ..., agent: _Optional[str] = ..., service: _Optional[str] = ..., time_unix_nano: _Optional[int] = ..., details: _Optional[_Mapping[str, str]] = ..., missed_before: _Optional[int] = ..., missed_after: _Optional[int] = ..., sequence: _Optional[int] = ..., traffic: _Optional[str] = ..., case_id: _Optional[str] = ..., source_trace_id: _Optional[str] = ..., pair_key: _Optional[str] = ..., missed_from_replay: _Optional[int] = ..., incomplete_reason: _Optional[str] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("categories", "min_severity", "agents", "missed_after", "resume")
    CATEGORIES_FIELD_NUMBER: _ClassVar[int]
    MIN_SEVERITY_FIELD_NUMBER: _ClassVar[int]
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    MISSED_AFTER_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    categories: _containers.RepeatedScalarFieldContainer[str]
    min_severity: str
    agents: _containers.RepeatedScalarFieldContainer[str]
    missed_after: bool
    resume: _containers.RepeatedCompositeFieldContainer[StreamCursor]
    def __init__(self, categories: _Optional[_Iterable[str]] = ..., min_severity: _Optional[str] = ..., agents: _Optional[_Iterable[str]] = ..., missed_after: _Optional[bool] = ..., resume: _Optional[_Iterable[_Union[StreamCursor, _Mapping]]] = ...) -> None: ...

class StreamCursor(_message.Message):
    __slots__ = ("stream_id", "after", "token")
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    stream_id: str
    after: int
    token: str
    def __init__(self, stream_id: _Optional[str] = ..., after: _Optional[int] = ..., token: _Optional[str] = ...) -> None: ...
