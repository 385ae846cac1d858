"""``toolwatch replay``'s input: files read a line at a time, runs evaluated as they are read."""

from __future__ import annotations

import dataclasses
import gc
import gzip
import io
import json
import os
import threading
import tracemalloc
from pathlib import Path

import pytest

from tests import factories
from toolwatch.config import Config, load_config
from toolwatch.ingest.otlp_json import latest_end_ns
from toolwatch.model_traces import ToolTrace
from toolwatch.replay import evaluate_offline, load_tool_traces
from toolwatch.replay_assembly import OfflineAssembler
from toolwatch.replay_files import Progress, ReplayInputError, _first_time
from toolwatch.replay_report import parse_gate
from toolwatch.sinks.tooltraces import tooltrace_to_dict

_FIXTURE = (
    Path(__file__).parents[1] / "fixtures" / "otlp" / "google_genai__otel_contrib__refund.json"
)


def _config() -> Config:
    return load_config(None, {})


def _dump_line(number: int, text: str | None = None) -> str:
    call = factories.tool_call(tool_name="lookup_order", span_id="00f067aa0ba902b7")
    trace = factories.tool_trace(
        trace_id=f"{number + 1:032x}", calls=(call,), span_count=2, final_text=text
    )
    return json.dumps(tooltrace_to_dict(trace))


def test_a_pretty_printed_otlp_document_reads_as_its_one_line_form(tmp_path: Path) -> None:
    document = json.loads(_FIXTURE.read_text())
    one_line, pretty = tmp_path / "one.jsonl", tmp_path / "pretty.json"
    one_line.write_text(json.dumps(document) + "\n")
    pretty.write_text(json.dumps(document, indent=2) + "\n")
    expected = list(load_tool_traces([one_line], _config()))
    assert [t.tool_names for t in expected] == [("lookup_order", "issue_refund")]
    assert list(load_tool_traces([pretty], _config())) == expected


def test_a_cut_pretty_printed_document_is_named_where_it_breaks(tmp_path: Path) -> None:
    cut = tmp_path / "cut.json"
    cut.write_text(
        '{\n  "resourceSpans": [\n    {\n      "resource": {"attributes": [{"key": "serv'
    )
    message = rf"^{cut}:4: not JSON: Unterminated string starting at \(column 43\)$"
    with pytest.raises(ReplayInputError, match=message):
        list(load_tool_traces([cut], _config()))
    # A JSON-lines file whose first line is broken is named by that line.
    lines = tmp_path / "lines.jsonl"
    lines.write_text(f'{{"resourceSpans": [}}\n{_dump_line(0)}\n')
    message = rf"^{lines}:1: not JSON: Expecting value \(column 20\)$"
    with pytest.raises(ReplayInputError, match=message):
        list(load_tool_traces([lines], _config()))


def test_lines_are_read_as_they_are_needed(tmp_path: Path) -> None:
    dump = tmp_path / "dump.jsonl"
    dump.write_text(f"{_dump_line(0)}\n\n{_dump_line(1)}\nnot json\n")
    traces = load_tool_traces([dump], _config())
    assert next(traces).trace_id == f"{1:032x}"
    assert next(traces).trace_id == f"{2:032x}"  # the blank line 2 skipped
    message = rf"^{dump}:4: not JSON: Expecting value \(column 1\)$"
    with pytest.raises(ReplayInputError, match=message):
        next(traces)


def test_a_gzipped_dump_reads_as_the_plain_one_and_a_cut_one_is_named(tmp_path: Path) -> None:
    lines = "".join(f"{_dump_line(i)}\n" for i in range(3)).encode()
    plain, zipped, cut = tmp_path / "d.jsonl", tmp_path / "d.jsonl.gz", tmp_path / "cut.jsonl.gz"
    plain.write_bytes(lines)
    zipped.write_bytes(gzip.compress(lines))
    cut.write_bytes(gzip.compress(lines)[:-12])
    assert list(load_tool_traces([zipped], _config())) == list(load_tool_traces([plain], _config()))
    with pytest.raises(ReplayInputError, match=rf"^{cut}: not a readable gzip file: "):
        list(load_tool_traces([cut], _config()))


def test_a_byte_that_is_not_utf8_is_named_by_line_and_offset(tmp_path: Path) -> None:
    first = _dump_line(0)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(first.encode() + b'\n{"x": "\xff"}\n')
    at = len(first) + 1 + len('{"x": "')
    message = rf"^{bad}:2: not UTF-8 text \(byte {at}: invalid start byte\)$"
    with pytest.raises(ReplayInputError, match=message):
        list(load_tool_traces([bad], _config()))


def _peak_replaying(path: Path, config: Config) -> tuple[int, int]:
    gc.collect()
    tracemalloc.start()
    try:
        report = evaluate_offline(load_tool_traces([path], config), config, [])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return report.traces, peak


def test_replaying_tooltrace_lines_holds_one_run_at_a_time(tmp_path: Path) -> None:
    config = _config()
    few, many = tmp_path / "few.jsonl", tmp_path / "many.jsonl"
    answer = "Your refund is on its way. " * 400  # 10 KB a run
    few.write_text("".join(f"{_dump_line(i, answer)}\n" for i in range(100)))
    many.write_text("".join(f"{_dump_line(i, answer)}\n" for i in range(400)))
    few_runs, few_peak = _peak_replaying(few, config)
    many_runs, many_peak = _peak_replaying(many, config)
    assert (few_runs, many_runs) == (100, 400)
    # The 300 runs more hold 3 MB of answers together (old code: 2.4 MB -> 9.5 MB peak); one
    # at a time, only the interpreter's free lists of small objects grow.
    assert many_peak - few_peak < 2**20, (few_peak, many_peak)


def test_a_run_read_twice_is_evaluated_once(tmp_path: Path) -> None:
    dump = tmp_path / "dump.jsonl"
    dump.write_text("".join(f"{_dump_line(i)}\n" for i in range(3)))
    config = _config()
    report = evaluate_offline(load_tool_traces([dump, dump], config), config, [])
    assert (report.traces, report.duplicates) == (3, 3)
    assert report.scores["loops"]["n"] == 3.0


def test_spans_whose_root_never_came_make_a_run_timed_out_as_in_serve(tmp_path: Path) -> None:
    document = json.loads(_FIXTURE.read_text())
    for scope in document["resourceSpans"][0]["scopeSpans"]:
        scope["spans"] = [s for s in scope["spans"] if s.get("parentSpanId")]
    rootless = tmp_path / "rootless.jsonl"
    rootless.write_text(json.dumps(document) + "\n")
    config = _config()
    (trace,) = load_tool_traces([rootless], config)
    assert (trace.complete, trace.incomplete_reason) == (False, "timed_out")
    report = evaluate_offline(load_tool_traces([rootless], config), config, [])
    assert report.incomplete == {"timed_out": 1}


def test_a_cut_line_in_a_json_lines_file_is_named_by_its_own_line(tmp_path: Path) -> None:
    cut = tmp_path / "cut.jsonl"
    good = _dump_line(0)
    cut.write_text(f"{good}\n{good[:40]}\n{_dump_line(1)}\n")
    with pytest.raises(ReplayInputError, match=rf"^{cut}:2: not JSON: "):
        list(load_tool_traces([cut], _config()))


def test_an_integer_literal_too_long_to_convert_is_read_as_the_server_reads_it(
    tmp_path: Path,
) -> None:
    """Ignored in a field receivers ignore; where an integer belongs, the span is rejected."""
    long = tmp_path / "long.jsonl"
    long.write_text(f"{_dump_line(0)}\n" + '{"resourceSpans": [], "x": ' + "1" * 5000 + "}\n")
    assert len(list(load_tool_traces([long], _config()))) == 1


def test_a_byte_order_mark_and_deep_nesting_read_as_the_server_reads_them(tmp_path: Path) -> None:
    marked = tmp_path / "bom.jsonl"
    marked.write_bytes(b"\xef\xbb\xbf" + _FIXTURE.read_bytes())
    assert [t.tool_names for t in load_tool_traces([marked], _config())] == [
        ("lookup_order", "issue_refund")
    ]
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"resourceSpans": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    with pytest.raises(ReplayInputError, match=rf"^{deep}:1: not usable JSON: nested too deeply$"):
        list(load_tool_traces([deep], _config()))


def test_shadow_roles_are_matched_as_the_servers_joiner_matches_them(tmp_path: Path) -> None:
    config = load_config(
        None,
        {"shadow.enabled": True, "shadow.source_value": "Prod ", "shadow.target_value": "canary"},
    )
    lines = []
    for number, role in enumerate(["prod", " CANARY"]):
        trace = factories.tool_trace(
            trace_id=f"{number + 1:032x}",
            reference_keys={"toolwatch.shadow.pair_id": "p-1", "toolwatch.shadow.role": role},
        )
        lines.append(json.dumps(tooltrace_to_dict(trace)))
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("\n".join(lines) + "\n")
    report = evaluate_offline(load_tool_traces([pairs], config), config, [])
    assert report.scores["composite"]["n"] == 1.0  # the pair, scored against its source


def test_a_trace_with_no_agent_model_or_tool_span_is_left_out_as_in_serve(tmp_path: Path) -> None:
    agent = json.loads(_FIXTURE.read_text())
    plain = json.loads(_FIXTURE.read_text())
    spans = [s for scope in plain["resourceSpans"][0]["scopeSpans"] for s in scope["spans"]]
    plain["resourceSpans"][0]["scopeSpans"] = [{"spans": spans}]
    for span in spans:  # the same tree, as an HTTP service's spans: no convention reads them
        span["traceId"] = "5" * 32
        span["name"] = "GET /orders"
        span["attributes"] = [{"key": "http.request.method", "value": {"stringValue": "GET"}}]
        span.pop("events", None)
    recorded = tmp_path / "mixed.jsonl"
    recorded.write_text(json.dumps(plain) + "\n" + json.dumps(agent) + "\n")
    warnings: list[str] = []
    traces = list(load_tool_traces([recorded], _config(), warn=warnings.append))
    assert [t.trace_id for t in traces] == [agent_trace_id(agent)]
    assert warnings == [
        "1 trace(s) with no agent, model or tool span left out, as serve leaves them out"
        " (not_an_agent_run)"
    ]


def test_a_span_rejected_as_invalid_leaves_its_run_incomplete_as_in_serve(tmp_path: Path) -> None:
    document = json.loads(_FIXTURE.read_text())
    spans = [s for scope in document["resourceSpans"][0]["scopeSpans"] for s in scope["spans"]]
    child = next(span for span in spans if span.get("parentSpanId"))
    child["parentSpanId"] = "0505"  # OTLP: empty or 8 bytes
    recorded = tmp_path / "rejected.jsonl"
    recorded.write_text(json.dumps(document) + "\n")
    warnings: list[str] = []
    (trace,) = load_tool_traces([recorded], _config(), warn=warnings.append)
    assert (trace.complete, trace.incomplete_reason) == (False, "span_limit")
    assert [w.split(": ")[1] for w in warnings] == ["1 span(s) left out as invalid"]


def test_a_run_whose_root_was_rejected_is_incomplete_not_timed_out(tmp_path: Path) -> None:
    """A LangGraph run whose root, its agent span, ingest rejects (its span id cut): the rest
    of the run is in the capture, its model calls under that local parent, which the rejected
    span may be.
    Was: judged ``timed_out`` at the end of the input ("the run had not ended"), streamed or
    not: no branch read the rejection without a root.
    Now: ``span_limit`` (a span of the run was not taken), as serve judges it once quiet
    ``completion_wait + lost_parent_wait``."""
    fixture = _FIXTURE.with_name("langgraph__langsmith__refund.json")
    document = json.loads(fixture.read_text())
    for scope in document["resourceSpans"][0]["scopeSpans"]:
        for span in scope["spans"]:
            if not span.get("parentSpanId"):
                span["spanId"] = "00"
    recorded = tmp_path / "rejected_root.jsonl"
    recorded.write_text(json.dumps(document) + "\n")
    for stream in (False, True):
        warnings: list[str] = []
        config = _config()
        (trace,) = load_tool_traces([recorded], config, warn=warnings.append, stream=stream)
        assert (trace.agent, trace.complete, trace.incomplete_reason) == (
            None,
            False,
            "span_limit",
        )
        assert [w.split(": ")[1] for w in warnings] == ["1 span(s) left out as invalid"]


def agent_trace_id(document: dict[str, object]) -> str:
    resource = document["resourceSpans"][0]  # type: ignore[index]
    return str(resource["scopeSpans"][0]["spans"][0]["traceId"]).lower()


def _recorded(number: int, at_seconds: float, *, spans: str = "all") -> str:
    """The fixture's run as trace ``number``, its spans moved to end ``at_seconds`` into the
    recording; ``spans`` keeps ``all``, the ``children`` or the ``root`` alone."""
    document = json.loads(_FIXTURE.read_text())
    every = [s for scope in document["resourceSpans"][0]["scopeSpans"] for s in scope["spans"]]
    shift = int(1_700_000_000e9 + at_seconds * 1e9) - max(int(s["endTimeUnixNano"]) for s in every)
    for scope in document["resourceSpans"][0]["scopeSpans"]:
        kept = []
        for span in scope["spans"]:
            if spans != "all" and (spans == "root") != ("parentSpanId" not in span):
                continue
            span["traceId"] = f"{number + 1:032x}"
            for key in ("startTimeUnixNano", "endTimeUnixNano"):
                span[key] = str(int(span[key]) + shift)
            kept.append(span)
        scope["spans"] = kept
    return json.dumps(document)


def _whole(trace: ToolTrace) -> bool:
    return trace.complete and trace.tool_names == ("lookup_order", "issue_refund")


def test_streamed_otlp_input_in_time_order_is_evaluated_as_it_is_read(tmp_path: Path) -> None:
    recorded = tmp_path / "capture.jsonl"  # a run a minute for 100 minutes, then a cut line
    runs = "".join(f"{_recorded(n, 60.0 * n)}\n" for n in range(100))
    recorded.write_text(runs + '{"resourceSpans": [\n')
    read: list[ToolTrace] = []
    with pytest.raises(ReplayInputError, match=rf"^{recorded}:101: not JSON: "):
        read.extend(load_tool_traces([recorded], _config(), stream=True))
    # The clock is the median of the last 63 records (minute 68 after the 100th), and a run
    # settles 300 s after its last span: runs 0-63 were evaluated before the cut line.
    assert [t.trace_id for t in read] == [f"{n + 1:032x}" for n in range(64)]
    assert all(_whole(t) for t in read)
    # Without --stream every span waits for the end of the input, which never came.
    held: list[ToolTrace] = []
    with pytest.raises(ReplayInputError, match=rf"^{recorded}:101: not JSON: "):
        held.extend(load_tool_traces([recorded], _config()))
    assert held == []


@pytest.mark.parametrize("stream", [False, True], ids=["held", "streamed"])
def test_replay_takes_every_assembly_limit_it_does_not_replace_from_the_config(
    stream: bool,
) -> None:
    settings = {
        "assembly.local_parent_wait_seconds": 0.5,
        "assembly.overflow": "evict_oldest",
        "assembly.max_spans_per_trace": 7,
        "assembly.max_remembered_traces": 9,
    }
    limits = load_config(None, settings).assembly.limits()
    replayed = OfflineAssembler(load_config(None, settings), stream=stream).limits
    replaced = {
        "completion_wait_ns",
        "max_trace_age_ns",
        "late_span_window_ns",
        "max_traces",
        "max_buffered_spans",
        "max_buffered_bytes",
    }
    for name in {f.name for f in dataclasses.fields(limits)} - replaced:
        assert getattr(replayed, name) == getattr(limits, name), name


def test_held_runs_are_evaluated_in_the_order_they_started_whatever_the_order_read() -> None:
    held = OfflineAssembler(_config())
    for n in (2, 0, 3, 1):  # trace n + 1 ends n minutes into the recording
        assert held.add(json.loads(_recorded(n, 60.0 * n)), f"capture:{n + 1}") == []
    runs = list(held.finish())
    assert [t.trace_id for t in runs] == [f"{n + 1:032x}" for n in range(4)]
    assert all(_whole(t) for t in runs)


def test_streaming_holds_the_clock_window_and_the_settle_wait_of_spans() -> None:
    assembler = OfflineAssembler(_config(), stream=True)
    held = OfflineAssembler(_config())
    runs: list[ToolTrace] = []
    for n in range(200):  # a run of 4 spans every 10 s
        record = json.loads(_recorded(n, 10.0 * n))
        runs += assembler.add(record, f"capture:{n + 1}")
        assert held.add(record, f"capture:{n + 1}") == []
    runs += assembler.finish()
    assert [t.trace_id for t in runs] == [f"{n + 1:032x}" for n in range(200)]
    assert all(_whole(t) for t in runs)
    # At most 63 runs wait: those that came before the clock's first median (63 records).
    assert (assembler.peak_buffered_spans, held.peak_buffered_spans) == (4 * 63, 4 * 200)


def _settled_then(*late: str) -> list[str]:
    """Run 0 at 0 s, then 63 runs from 400 s on, which move the clock past its wait."""
    return [_recorded(0, 0.0), *(_recorded(n, 400.0 + n) for n in range(1, 64)), *late]


def test_a_span_recorded_after_its_trace_settled_is_named_and_left_out(tmp_path: Path) -> None:
    recorded = tmp_path / "capture.jsonl"
    recorded.write_text("\n".join(_settled_then(_recorded(0, 0.0, spans="children"))) + "\n")
    warnings: list[str] = []
    traces = list(load_tool_traces([recorded], _config(), warn=warnings.append, stream=True))
    assert [t.trace_id for t in traces] == [f"{n + 1:032x}" for n in range(64)]
    assert all(_whole(t) for t in traces)
    assert warnings == [
        f"{recorded}:65: 3 span(s) left out: their trace was already evaluated: the input is"
        " not in time order, or they were recorded more than 300 s after the rest of it"
        " (without --stream, replay holds every span until the input ends)"
    ]


def test_a_span_recorded_long_after_its_trace_is_still_named_not_a_second_run(
    tmp_path: Path,
) -> None:
    """An hour after its trace was evaluated, far past serve's 300 s late-span window."""
    later = [_recorded(n, 3600.0 + n) for n in range(64, 127)]  # the clock moves an hour on
    lines = [*_settled_then(), *later, _recorded(0, 0.0, spans="children")]
    recorded = tmp_path / "capture.jsonl"
    recorded.write_text("\n".join(lines) + "\n")
    warnings: list[str] = []
    traces = list(load_tool_traces([recorded], _config(), warn=warnings.append, stream=True))
    assert [t.trace_id for t in traces] == [f"{n + 1:032x}" for n in range(127)]
    assert all(_whole(t) for t in traces)
    assert len(warnings) == 1
    assert warnings[0].startswith(f"{recorded}:128: 3 span(s) left out: their trace was already")


def test_spans_of_one_trace_recorded_within_the_wait_make_one_run(tmp_path: Path) -> None:
    recorded = tmp_path / "capture.jsonl"
    lines = [
        _recorded(0, 0.0, spans="children"),
        *(_recorded(n, 200.0 + n) for n in range(1, 64)),  # the clock moves, not past 300 s
        _recorded(0, 0.0, spans="root"),  # the root comes late, as a retried batch would
    ]
    recorded.write_text("\n".join(lines) + "\n")
    warnings: list[str] = []
    traces = list(load_tool_traces([recorded], _config(), warn=warnings.append, stream=True))
    assert len(traces) == 64
    assert _whole({t.trace_id: t for t in traces}[f"{1:032x}"])
    assert warnings == []


def test_captures_of_the_same_hours_make_whole_runs_streamed_too(tmp_path: Path) -> None:
    # Two Collectors' captures of the same hours, each with part of every trace.
    children, roots = tmp_path / "tools.jsonl", tmp_path / "agents.jsonl"
    children.write_text(
        "".join(f"{_recorded(n, 60.0 * n, spans='children')}\n" for n in range(100))
    )
    roots.write_text("".join(f"{_recorded(n, 60.0 * n, spans='root')}\n" for n in range(100)))
    warnings: list[str] = []
    held = list(load_tool_traces([roots, children], _config(), warn=warnings.append))
    assert warnings == []
    assert [t.trace_id for t in held] == [f"{n + 1:032x}" for n in range(100)]
    assert all(_whole(t) for t in held)
    # Streamed, the files are read together, in recorded time: the same runs, as they settle.
    streamed = list(
        load_tool_traces([roots, children], _config(), warn=warnings.append, stream=True)
    )
    assert warnings == []
    assert [t.trace_id for t in streamed] == [f"{n + 1:032x}" for n in range(100)]
    assert all(_whole(t) for t in streamed)


def test_streamed_files_given_out_of_order_are_read_in_recorded_time(tmp_path: Path) -> None:
    """A capture rotated into hourly files, named on the command line newest first; each
    file's own order is kept, so a record out of order within a file is still late."""
    first, second = tmp_path / "00.jsonl", tmp_path / "01.jsonl"
    first.write_text("".join(f"{_recorded(n, 60.0 * n)}\n" for n in range(60)))
    second.write_text(
        "".join(f"{_recorded(n, 60.0 * n)}\n" for n in range(60, 120))
        + _recorded(0, 0.0, spans="children")  # recorded again an hour late, in this file
        + "\n"
    )
    warnings: list[str] = []
    traces = list(load_tool_traces([second, first], _config(), warn=warnings.append, stream=True))
    assert [t.trace_id for t in traces] == [f"{n + 1:032x}" for n in range(120)]
    assert all(_whole(t) for t in traces)
    assert warnings == [
        f"{second}:61: 3 span(s) left out: their trace was already evaluated: the input is"
        " not in time order, or they were recorded more than 300 s after the rest of it"
        " (without --stream, replay holds every span until the input ends)"
    ]


def test_one_batch_from_a_clock_far_ahead_does_not_hold_its_file_back(tmp_path: Path) -> None:
    children, roots = tmp_path / "tools.jsonl", tmp_path / "agents.jsonl"
    lines = [_recorded(n, 60.0 * n, spans="children") for n in range(100)]
    lines.insert(5, _recorded(500, 365 * 86400.0))  # a whole run from a host a year ahead
    children.write_text("\n".join(lines) + "\n")
    roots.write_text("".join(f"{_recorded(n, 60.0 * n, spans='root')}\n" for n in range(100)))
    warnings: list[str] = []
    traces = list(load_tool_traces([roots, children], _config(), warn=warnings.append, stream=True))
    assert warnings == []
    assert sorted(t.trace_id for t in traces) == sorted(f"{n + 1:032x}" for n in [*range(100), 500])
    assert all(_whole(t) for t in traces)


def test_a_rotated_capture_s_files_are_opened_one_or_two_at_a_time(tmp_path: Path) -> None:
    paths = []
    for hour in range(200):  # a run an hour, a file an hour, named newest first
        path = tmp_path / f"{hour:04d}.jsonl"
        path.write_text(_recorded(hour, 3600.0 * hour) + "\n")
        paths.insert(0, path)
    fds = Path("/proc/self/fd")
    before = len(list(fds.iterdir()))
    most = 0
    traces = []
    for trace in load_tool_traces(paths, _config(), stream=True):
        traces.append(trace)
        most = max(most, len(list(fds.iterdir())) - before)
    assert [t.trace_id for t in traces] == [f"{n + 1:032x}" for n in range(200)]
    assert 1 <= most <= 2


def test_latest_end_reads_both_spellings_and_skips_what_is_no_time() -> None:
    document = {
        "resourceSpans": [
            {"scopeSpans": [{"spans": [{"endTimeUnixNano": "7"}, {"endTimeUnixNano": 9}]}]},
            {"scope_spans": [{"spans": [{"end_time_unix_nano": "11"}]}]},
        ]
    }
    assert latest_end_ns(document) == 11
    for odd in ("soon", 1.5e9, True, None, [], "1e9"):
        assert (
            latest_end_ns(
                {
                    "resourceSpans": [
                        {
                            "scopeSpans": [
                                {"spans": [{"endTimeUnixNano": odd}, {"endTimeUnixNano": "3"}]}
                            ]
                        }
                    ]
                }
            )
            == 3
        )
    assert latest_end_ns({"resourceSpans": "x"}) == 0
    assert latest_end_ns({}) == 0


def test_a_host_whose_clock_runs_ahead_does_not_settle_the_traces_in_flight(
    tmp_path: Path,
) -> None:
    lines = [_recorded(n, 60.0 * n) for n in range(100)]  # a run a minute
    # Run 70's tools are exported after its root, with a run between from a host two hours
    # fast: had that run moved the clock, run 70 would settle before its tools came.
    lines[70] = _recorded(70, 4200.0, spans="root")
    lines[71:71] = [_recorded(200, 4200.0 + 7200.0), _recorded(70, 4200.0, spans="children")]
    recorded = tmp_path / "capture.jsonl"
    recorded.write_text("\n".join(lines) + "\n")
    warnings: list[str] = []
    traces = list(load_tool_traces([recorded], _config(), warn=warnings.append, stream=True))
    assert warnings == []
    assert sorted(t.trace_id for t in traces) == sorted(f"{n + 1:032x}" for n in [*range(100), 200])
    assert all(_whole(t) for t in traces)


def test_a_quiet_hour_in_the_recording_cuts_no_run(tmp_path: Path) -> None:
    # A run every 2 s, its tools exported after its root, and an hour with no runs:
    # the clock leaps an hour when the window fills with runs after the gap, but the runs
    # read just before that still wait their 300 s for their tools.
    lines = []
    for n in range(0, 120, 2):  # two runs' roots, then their tools
        if n == 60:  # the first run after the gap comes whole (the clock leaps between
            lines.append(_recorded(500, 3700.0))  # a root and its tools, as it may)
        at = [2.0 * m + (3600.0 if m >= 60 else 0.0) for m in (n, n + 1)]
        lines += [_recorded(m, t, spans="root") for m, t in zip((n, n + 1), at, strict=True)]
        lines += [_recorded(m, t, spans="children") for m, t in zip((n, n + 1), at, strict=True)]
    recorded = tmp_path / "capture.jsonl"
    recorded.write_text("\n".join(lines) + "\n")
    warnings: list[str] = []
    traces = list(load_tool_traces([recorded], _config(), warn=warnings.append, stream=True))
    assert warnings == []
    assert sorted(t.trace_id for t in traces) == [f"{n + 1:032x}" for n in [*range(120), 500]]
    assert all(_whole(t) for t in traces)


def test_progress_gives_files_read_together_one_line_and_files_read_in_turn_one_each() -> None:
    shown = io.StringIO()
    progress = Progress(shown, enabled=True)
    progress.update("/in/a.jsonl", 500_000, 1_000_000)
    progress.done("/in/a.jsonl")
    progress.update("/in/b.jsonl", 1_000_000, 1_000_000)
    progress.done("/in/b.jsonl")
    assert shown.getvalue() == (f"\ra.jsonl: [{'#' * 12:<25}]  50%\n\rb.jsonl: [{'#' * 25}] 100%\n")
    shown = io.StringIO()
    progress = Progress(shown, enabled=True)
    progress.update("/in/a.jsonl", 250_000, 1_000_000)  # the merge reads both, in turn
    progress.update("/in/b.jsonl", 250_000, 1_000_000)
    progress.update("/in/a.jsonl", 1_000_000, 1_000_000)
    progress.done("/in/a.jsonl")  # the line goes on while b is read
    progress.update("/in/b.jsonl", 1_000_000, 1_000_000)
    progress.done("/in/b.jsonl")
    assert shown.getvalue().split("\r")[1:] == [
        f"a.jsonl: [{'#' * 6:<25}]  25%",  # b.jsonl, at 25% too, changes nothing shown
        f"2 files: [{'#' * 15:<25}]  62%",
        f"2 files: [{'#' * 25}] 100%\n",
    ]


def test_a_pipe_among_streamed_files_is_read_once_from_its_start(tmp_path: Path) -> None:
    """``replay --stream <(zcat tools.jsonl.gz) agents.jsonl``: a pipe cannot be read twice,
    so its first record is not read ahead: it is opened at once."""
    pipe, roots = tmp_path / "tools.pipe", tmp_path / "agents.jsonl"
    os.mkfifo(pipe)
    tools = "".join(f"{_recorded(n, 60.0 * n, spans='children')}\n" for n in range(100))
    roots.write_text("".join(f"{_recorded(n, 60.0 * n, spans='root')}\n" for n in range(100)))

    def write() -> None:
        with pipe.open("w") as out:
            out.write(tools)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        warnings: list[str] = []
        traces = list(load_tool_traces([roots, pipe], _config(), warn=warnings.append, stream=True))
    finally:
        writer.join(timeout=10)
    assert warnings == []
    assert [t.trace_id for t in traces] == [f"{n + 1:032x}" for n in range(100)]
    assert all(_whole(t) for t in traces)


def test_streamed_files_share_one_progress_line_from_0_to_100(tmp_path: Path) -> None:
    paths = []
    for hour in range(3):  # a rotated capture, read one file after another
        path = tmp_path / f"{hour:02d}.jsonl"
        runs = range(150 * hour, 150 * (hour + 1))
        path.write_text("".join(f"{_recorded(n, 20.0 * n)}\n" for n in runs))
        paths.append(path)
    assert sum(path.stat().st_size for path in paths) > 1_000_000  # shown from 1 MB on
    shown = io.StringIO()
    traces = list(load_tool_traces(paths, _config(), Progress(shown, enabled=True), stream=True))
    assert len(traces) == 450
    assert shown.getvalue().endswith("%\n") and shown.getvalue().count("\n") == 1
    steps = shown.getvalue().strip().split("\r")[1:]
    assert all(step.startswith("3 files: [") for step in steps)
    percents = [int(step.rstrip("%").rsplit(" ", 1)[1]) for step in steps]
    assert percents == sorted(percents) and percents[-1] >= 99


def test_a_file_that_is_one_document_is_not_read_ahead(tmp_path: Path) -> None:
    document = tmp_path / "one.json"
    document.write_text(json.dumps(json.loads(_recorded(0, 0.0)), indent=2))
    assert _first_time(document) == 0
    line = tmp_path / "lines.jsonl"
    line.write_text(_recorded(0, 0.0) + "\n")
    assert _first_time(line) == int(1_700_000_000e9)


def test_a_one_document_file_among_streamed_files_counts_as_read_whole(tmp_path: Path) -> None:
    lines = tmp_path / "lines.jsonl"
    lines.write_text("".join(f"{_recorded(n, 20.0 * n)}\n" for n in range(1, 400)))
    document = tmp_path / "one.json"
    document.write_text(json.dumps(json.loads(_recorded(0, 0.0)), indent=2))
    assert lines.stat().st_size + document.stat().st_size > 1_000_000
    shown = io.StringIO()
    progress = Progress(shown, enabled=True)
    traces = list(load_tool_traces([document, lines], _config(), progress, stream=True))
    assert len(traces) == 400
    assert shown.getvalue().endswith("] 100%\n")


def test_replay_counts_what_a_conversation_verified_before_a_run_as_serve_does(
    tmp_path: Path,
) -> None:
    policy = tmp_path / "toolwatch.yaml"
    policy.write_text(
        "policy:\n  dangerous_tools: [issue_refund]\n  verification_tools: [lookup_order]\n"
        "  verification_scope: conversation\n"
    )
    config = load_config(policy, {})
    early = factories.tool_call(tool_name="lookup_order", span_id="a1", end_ns=10)
    late = factories.tool_call(tool_name="lookup_order", span_id="a2", end_ns=50)
    refund = factories.tool_call(tool_name="issue_refund", span_id="b1", end_ns=30)

    def run(n: int, conversation: str, call: object, start: int) -> ToolTrace:
        return factories.tool_trace(
            trace_id=f"{n:032x}", conversation_id=conversation, calls=(call,), start_ns=start
        )

    runs = [
        run(1, "c1", early, 0),
        run(2, "c3", late, 40),  # read before c3's refund, but made after it began
        run(3, "c1", refund, 20),
        run(4, "c2", refund, 20),
        run(5, "c3", refund, 20),
    ]
    report = evaluate_offline(runs, config, [])
    assert report.findings == {"MISSING_VERIFICATION_STEP": {"high": 2}}  # c2's and c3's


_SECOND = 1_000_000_000


def _shadow_run(
    number: int, key: str, role: str, at_s: int, *tools: str, case: str | None = None
) -> str:
    calls = tuple(
        factories.tool_call(tool_name=tool, sequence_index=i, arguments={"order_id": "A-1"})
        for i, tool in enumerate(tools)
    )
    keys = {"toolwatch.shadow.pair_id": key, "toolwatch.shadow.role": role}
    if case is not None:
        keys["toolwatch.case_id"] = case
    trace = factories.tool_trace(
        trace_id=f"{number:032x}",
        agent="refund-bot",
        calls=calls,
        start_ns=at_s * _SECOND,
        end_ns=at_s * _SECOND + _SECOND,
        reference_keys=keys,
    )
    return json.dumps(tooltrace_to_dict(trace))


def test_a_target_with_a_golden_case_is_compared_with_its_source_as_in_serve(
    tmp_path: Path,
) -> None:
    """A canary run the candidate serves too is judged against its golden case; the pair's
    pass compares it with production's run only where an evaluator is set ``against:
    source`` (``order`` here), as serve does: the target that met its case gates nothing
    against production's run, which stopped short of the refund, and is scored once."""
    (tmp_path / "cases.yaml").write_text(
        "cases:\n  - {id: refund-canary, expected_tools: [lookup_order, issue_refund]}\n"
    )
    config_file = tmp_path / "toolwatch.yaml"
    config_file.write_text(
        "policy: {dangerous_tools: [issue_refund], verification_tools: [lookup_order]}\n"
        "golden: {cases_file: cases.yaml}\nshadow: {enabled: true}\n"
        "evaluators: {order: {against: source}}\n"
    )
    config = load_config(config_file, {})
    lines = [
        _shadow_run(1, "k1", "source", 0, "lookup_order", case="refund-canary"),
        _shadow_run(2, "k1", "target", 0, "lookup_order", "issue_refund", case="refund-canary"),
    ]
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("\n".join(lines) + "\n")
    report = evaluate_offline(load_tool_traces([pairs], config), config, [])
    against_source = [
        (f["evaluator"], f["category"]) for f in report.finding_list if f["reference"] == "source"
    ]
    assert against_source == [("order", "TOOL_ORDER_DRIFT")]
    assert report.scores["tool_selection"]["n"] == 1.0  # the target, against its case alone
    assert report.scores["composite"]["n"] == 1.0
    assert report.scores["order"] == {"n": 1.0, "score": 0.5}


def test_shadow_pairs_are_joined_as_the_server_joins_them_and_the_rest_is_told(
    tmp_path: Path,
) -> None:
    """A pair key used again after the timeout is a new pair (the first pair's halves alone
    were kept, so the candidate's double refund was never compared); a candidate with no
    source is said, not dropped unsaid; and the serving model's own faults are not the
    candidate's to fail a gate on."""
    config = load_config(
        None,
        {
            "shadow.enabled": True,
            "policy.dangerous_tools": ["issue_refund"],
            "policy.verification_tools": ["lookup_order"],
        },
    )
    verified = ("lookup_order", "issue_refund")
    lines = [  # out of time order, as files given in any order are
        _shadow_run(4, "k1", "target", 100, *verified, "issue_refund"),
        _shadow_run(1, "k1", "source", 0, *verified),
        _shadow_run(2, "k1", "target", 0, *verified),
        _shadow_run(3, "k1", "source", 100, *verified),
        _shadow_run(5, "k2", "target", 0, *verified),
        _shadow_run(6, "k3", "source", 0, "issue_refund"),  # production's unverified refund
        _shadow_run(7, "k3", "target", 0, *verified),
    ]
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("\n".join(lines) + "\n")
    gate = parse_gate("MISSING_VERIFICATION_STEP=0", "max")
    report = evaluate_offline(load_tool_traces([pairs], config), config, [gate])
    assert report.scores["composite"]["n"] == 3.0  # k1 twice, k3
    drift = [f for f in report.finding_list if f["category"] == "DANGEROUS_ACTION_DRIFT"]
    assert [f["trace_id"] for f in drift] == [f"{4:032x}"]
    assert report.shadow_unpaired == {"timed_out": 1}  # k2's candidate waited in vain
    assert (report.traces, report.sources) == (4, 3)
    assert report.source_findings == {"MISSING_VERIFICATION_STEP": 1}
    assert report.passed  # production's unverified refund is not the candidate's
    assert "1 shadow run(s) (timed_out=1) never compared" in report.to_text()


def test_the_runs_of_one_trace_are_offered_to_the_joiner_as_serve_offers_them(
    tmp_path: Path,
) -> None:
    """A moderation run under the same pair key ends first; serve offers a trace's runs
    together, in start order, so the main runs pair (and the candidate's double refund is
    compared), and the moderation runs are the duplicates."""
    config = load_config(None, {"shadow.enabled": True, "policy.dangerous_tools": ["issue_refund"]})
    lines = []
    for trace_id, role, refunds in ((1, "source", 1), (2, "target", 2)):
        for span, start, end, tools in (
            ("a1", 0, 10, ("lookup_order",) + ("issue_refund",) * refunds),
            ("b2", 1, 3, ()),
        ):
            calls = tuple(
                factories.tool_call(tool_name=tool, sequence_index=i, arguments={"order_id": "1"})
                for i, tool in enumerate(tools)
            )
            run = factories.tool_trace(
                trace_id=f"{trace_id:032x}",
                run_span_id=span * 8,
                calls=calls,
                start_ns=start * _SECOND,
                end_ns=end * _SECOND,
                reference_keys={"toolwatch.shadow.pair_id": "k", "toolwatch.shadow.role": role},
            )
            lines.append(json.dumps(tooltrace_to_dict(run)))
    recorded = tmp_path / "runs.jsonl"
    recorded.write_text("\n".join(lines) + "\n")
    report = evaluate_offline(load_tool_traces([recorded], config), config, [])
    drift = [
        f["trace_id"] for f in report.finding_list if f["category"] == "DANGEROUS_ACTION_DRIFT"
    ]
    assert drift == [f"{2:032x}"]
    assert report.shadow_unpaired == {"duplicate": 2}


def test_a_trace_id_used_again_later_does_not_hold_back_its_earlier_halves(
    tmp_path: Path,
) -> None:
    """A session's trace id carries a run 15 minutes on: serve completed the first runs long
    before it, and paired them."""
    config = load_config(None, {"shadow.enabled": True, "policy.dangerous_tools": ["issue_refund"]})
    lines = [
        _shadow_run(1, "k1", "source", 0, "lookup_order", "issue_refund"),
        _shadow_run(2, "k1", "target", 0, "lookup_order", "issue_refund", "issue_refund"),
        json.dumps(
            tooltrace_to_dict(
                factories.tool_trace(
                    trace_id=f"{1:032x}",
                    run_span_id="c" * 16,
                    start_ns=900 * _SECOND,
                    end_ns=901 * _SECOND,
                )
            )
        ),
    ]
    recorded = tmp_path / "runs.jsonl"
    recorded.write_text("\n".join(lines) + "\n")
    report = evaluate_offline(load_tool_traces([recorded], config), config, [])
    drift = [
        f["trace_id"] for f in report.finding_list if f["category"] == "DANGEROUS_ACTION_DRIFT"
    ]
    assert (drift, report.shadow_unpaired) == ([f"{2:032x}"], {})
