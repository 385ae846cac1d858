"""Tool names the configuration gives are matched as the calls' names are: normalized."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from toolwatch.config import Config, ConfigError, check_outputs, load_config
from toolwatch.engine_setup import known_tools
from toolwatch.outputs import OutputError, open_text


def config(**sections: object) -> Config:
    return Config.model_validate(sections)


def test_the_tool_labels_kept_under_the_cap_are_spelled_as_calls_are() -> None:
    tools = config(
        policy={
            "dangerous_tools": [" Issue_Refund "],
            "verification_tools": ["LOOKUP_ORDER"],
            "aliases": {"refund": "issue_refund"},
            "allowed_tools": {"refund-bot": ["Refund", "search"]},
        },
        metrics={"tools": ["Get_Weather"]},
    )
    expected = ("get_weather", "issue_refund", "lookup_order", "search")
    assert known_tools(tools, None) == expected


@pytest.mark.parametrize("entry", ["", "issue_refund.", ".order_id", "a..b", " "])
def test_a_shown_field_that_is_no_field_path_is_refused(entry: str) -> None:
    with pytest.raises(ConfigError, match="is no field path"):
        load_config(None, {"output.show_fields": [entry]})


def test_a_shown_field_naming_a_policy_tool_unnormalized_says_how_findings_name_it() -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(
            None,
            {
                "policy.dangerous_tools": ["issue_refund"],
                "output.show_fields": ["order_id", "Issue_Refund.amount"],
            },
        )
    assert (
        "output.show_fields: 'Issue_Refund.amount' names tool 'Issue_Refund', which findings"
        " call 'issue_refund': write 'issue_refund.amount'"
    ) in str(refused.value)
    # A field path of any tool may hold capitals: only a tool the policy names is checked.
    shown = load_config(None, {"output.show_fields": ["Order.Id", "issue_refund.amount"]})
    assert shown.output.show_fields == ("Order.Id", "issue_refund.amount")


@pytest.mark.parametrize("setting", ["output.findings", "output.dump_tooltraces"])
def test_an_output_file_serve_could_not_open_is_refused_by_check_config_too(
    setting: str, tmp_path: Path
) -> None:
    refusals = {
        "": "empty path: give a file, - for standard output, or null for off",
        str(tmp_path): f"{tmp_path} is a directory, not a file",
        str(tmp_path / "nope" / "f.jsonl"): f"directory {tmp_path / 'nope'} does not exist",
        # A path that ends in /: open() refused it at serve ("Is a directory").
        f"{tmp_path}/new.jsonl/": f"{tmp_path}/new.jsonl/ names a directory, not a file",
        f"{tmp_path}/new/.": f"{tmp_path}/new/. names a directory, not a file",
    }
    for target, reason in refusals.items():
        overrides = {setting: target}
        config = load_config(None, overrides)  # replay writes none: loads anywhere
        with pytest.raises(ConfigError) as refused:
            check_outputs(config, None, overrides)
        assert str(refused.value) == f"command line/environment: {setting}: {reason}", target
    for target in ("-", str(tmp_path / "f.jsonl")):
        check_outputs(load_config(None, {setting: target}), None, {setting: target})


def test_an_output_naming_a_descriptor_not_open_is_refused_naming_it() -> None:
    """``/dev/stderr`` and ``/dev/fd/N`` name a descriptor of the process. Was: one not open
    passed as root (its directory, ``/proc/PID/fd``, root may write), and was refused as
    anyone else with "/dev is not writable"; ``serve`` then failed with "No such file or
    directory". Now the check says which descriptor is not open; an open one (a socket: the
    journal's stream on standard error) passes."""
    closed = os.dup(0)
    os.close(closed)
    setting, target = "output.findings", f"/dev/fd/{closed}"
    with pytest.raises(ConfigError) as refused:
        check_outputs(load_config(None, {setting: target}), None, {setting: target})
    assert str(refused.value) == (
        f"command line/environment: {setting}: {target}: descriptor {closed} is not open"
    )
    ours, theirs = socket.socketpair()
    with ours, theirs:
        target = f"/dev/fd/{ours.fileno()}"
        check_outputs(load_config(None, {setting: target}), None, {setting: target})


def test_a_file_that_passes_the_checks_but_will_not_open_is_named_with_its_setting() -> None:
    # /proc/version exists, sits in a directory, and refuses to be written (root included).
    with pytest.raises(OutputError, match=r"^cannot open /proc/version \(output\.findings\): "):
        open_text("output.findings", "/proc/version")


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        (
            {"policy.aliases": {"LookupOrder": "lookup_order", "lookuporder": "search_kb"}},
            "policy.aliases: aliases 'LookupOrder' and 'lookuporder' are one alias: names are"
            " compared trimmed and case-folded",
        ),
        (
            {"policy.repeat_limits": {"Poll": 1, "poll": 5}},
            "policy: repeat_limits 'Poll' and 'poll' are one tool: tool names are compared as"
            " calls' are (trimmed, case-folded, tool_prefix removed, aliased)",
        ),
        (  # one through an alias: loops keys its limits on the normalized name
            {
                "policy.aliases": {"refund": "issue_refund"},
                "policy.repeat_limits": {"issue_refund": 1, "Refund": 5},
            },
            "policy: repeat_limits 'issue_refund' and 'Refund' are one tool",
        ),
        (
            {
                "evaluators.tool_arguments.strategies": {
                    "Issue_Refund.amount_usd": "numeric",
                    "issue_refund.amount_usd": "exact",
                }
            },
            "(top level): evaluators.tool_arguments.strategies 'Issue_Refund.amount_usd' and"
            " 'issue_refund.amount_usd' are one tool.field: tool names are compared as calls'"
            " are (trimmed, case-folded, tool_prefix removed, aliased)",
        ),
        (
            {
                "policy.aliases": {"refund": "issue_refund"},
                "evaluators.tool_arguments.strategies": {
                    "REFUND": "fuzzy",
                    "issue_refund": "exact",
                },
            },
            "evaluators.tool_arguments.strategies 'REFUND' and 'issue_refund' are one tool",
        ),
    ],
)
def test_two_keys_for_one_normalized_name_are_refused_naming_both(
    overrides: dict[str, object], reason: str
) -> None:
    """Keyed by the normalized name, one entry silently replaced the other."""
    with pytest.raises(ConfigError) as refused:
        load_config(None, overrides)
    assert f": {reason}" in str(refused.value)
    # A tool's strategy, its field's and every tool's field are three keys, not one.
    strategies = {
        "Issue_Refund": "fuzzy",
        "issue_refund.amount_usd": "numeric",
        "*.amount_usd": "exact",
    }
    config = load_config(None, {"evaluators.tool_arguments.strategies": strategies})
    assert config.evaluators.tool_arguments.strategies == strategies


def test_two_fields_of_different_tools_still_load_under_a_dotted_tool_prefix() -> None:
    """Harm: a configuration that loaded at 9752a75 stops ``serve`` (and a reload) after the
    upgrade. A deployment whose MCP client names tools ``billing.issue_refund`` strips that
    namespace with ``tool_prefix: '[a-z0-9_-]+?\\.'`` (the dotted twin of docs/configuration.md's
    ``'[a-z0-9_-]+?__'``). Its strategies name two different tools' ``reason`` field.
    7ec1810 also registers each dotted key as a dotted *tool* and refuses two keys whose
    whole names normalize alike: the prefix turns both ``lookup_order.reason`` and
    ``issue_refund.reason`` into ``reason``, so start-up fails with "are one tool", though
    they name two fields of two tools (and neither is a dotted tool). The commit message
    announces only the refusal of keys with more than one dot."""
    config = {
        "policy": {"tool_prefix": r"[a-z0-9_-]+?\."},
        "evaluators": {
            "tool_arguments": {
                "strategies": {"lookup_order.reason": "contains", "issue_refund.reason": "fuzzy"}
            }
        },
    }
    Config.model_validate(config)  # raises ValidationError at HEAD
