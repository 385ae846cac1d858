"""Configuration errors of the policy: a tool both dangerous and verifying, evaluators held to a
reference that never comes, tool prefixes and aliases, refusal patterns."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.config_errors_support import error_lines
from toolwatch.config import Config, ConfigError, load_config


def test_a_tool_both_dangerous_and_verifying_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "toolwatch.yaml"
    config.write_text(
        "policy:\n  dangerous_tools: [issue_refund]\n"
        "  verification_tools: [lookup_order, Issue_Refund]\n"
    )
    assert error_lines(config, {})[1].startswith(
        f"  {config}: policy: 'issue_refund' is in both dangerous_tools and"
        " verification_tools: a dangerous call cannot verify another"
    )


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        (
            {"evaluators.order.against": "expected"},
            "evaluators.order.against is 'expected' but golden.cases_file is not set, so it"
            " would never run: configure that reference, use 'auto', or set"
            " evaluators.order.enabled: false",
        ),
        (
            {"evaluators.tool_selection.against": "source"},
            "evaluators.tool_selection.against is 'source' but shadow is off, so it would"
            " never run",
        ),
    ],
)
def test_an_evaluator_held_to_a_reference_that_never_comes_is_refused(
    overrides: dict[str, object], reason: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(None, overrides)
    assert reason in str(refused.value)
    name = next(iter(overrides)).split(".")[1]
    assert load_config(None, {**overrides, f"evaluators.{name}.enabled": False}) is not None


def test_security_that_names_no_listener_is_refused_and_safety_may_name_a_reference(
    tmp_path: Path,
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("s3cret-token-value\n")
    auth = {"security.auth.bearer_token_file": str(tokens)}
    with pytest.raises(ConfigError) as refused:
        load_config(None, {**auth, "security.auth.listeners": []})
    assert (
        "security.auth.listeners: names no listener, so bearer tokens would guard"
        " none: name some of grpc, http, metrics, stream, or leave the section out"
    ) in str(refused.value)
    # safety's policy checks run whatever its drift is compared with: accepted.
    assert load_config(None, {"evaluators.safety.against": "source"}) is not None


def test_the_guarded_tools_are_the_dangerous_verification_and_invariant_ones() -> None:
    config = Config.model_validate(
        {
            "policy": {
                "tool_prefix": "(mcp__)?[a-z]+__",
                "dangerous_tools": ["Issue_Refund"],
                "verification_tools": ["lookup_order"],
                "allowed_tools": {"bot": ["search_kb"]},
                "invariants": [{"kind": "forbidden", "tool": "drop_table"}],
            }
        }
    )
    assert config.policy.guarded_tools() == {"issue_refund", "lookup_order", "drop_table"}


@pytest.mark.parametrize(
    ("policy", "reason"),
    [
        (
            "  allowed_tools:\n    bot: [sandbox__issue_refund]\n",
            "policy: allowed_tools.bot names 'sandbox__issue_refund', which tool_prefix makes"
            " 'issue_refund' in every call, whatever its namespace: write 'issue_refund'",
        ),
        (
            "  invariants:\n    - {kind: order, before: lookup_order, after: mcp__x__refund}\n",
            "policy: invariants (order) names 'mcp__x__refund', which tool_prefix makes 'refund'",
        ),
        (
            "  aliases:\n    kb__search: search_kb\n    crm__search: search_crm\n",
            "policy: aliases 'kb__search' and 'crm__search' are both 'search' once tool_prefix"
            " removes their namespace, and map it to different tools",
        ),
    ],
)
def test_a_policy_name_the_tool_prefix_would_shorten_is_refused(
    tmp_path: Path, policy: str, reason: str
) -> None:
    config = tmp_path / "toolwatch.yaml"
    config.write_text("policy:\n  tool_prefix: '(mcp__)?[a-z0-9_-]+?__'\n" + policy)
    assert error_lines(config, {})[1].startswith(f"  {config}: {reason}")


def test_aliases_of_two_namespaces_to_one_tool_are_one_alias() -> None:
    policy = {
        "tool_prefix": "[a-z]+__",
        "aliases": {"kb__search": "search_kb", "docs__search": "Search_KB"},
    }
    assert Config.model_validate({"policy": policy}).policy.normalizer()("x__search") == "search_kb"


@pytest.mark.parametrize("pattern", [r"^\W*$", r"^(?!.*\w)"])
def test_a_refusal_pattern_that_matches_only_an_answer_of_no_words_stays(
    tmp_path: Path, pattern: str
) -> None:
    """It matches an empty text, but not every text: an answer of no words ("...") only."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(
        f"evaluators:\n  tool_trace_structure:\n    refusal_patterns: ['{pattern}']\n"
    )
    assert load_config(config, {}).evaluators.tool_trace_structure.refusal_patterns == (pattern,)


@pytest.mark.parametrize(
    ("text", "override", "where", "got", "at"),
    [
        ('listen: "0.0.0.0:4317"\n', "listen.grpc", "listen", "'0.0.0.0:4317'", "1, column 9"),
        ("listen:\n", "listen.grpc", "listen", "None", "1, column 8"),
        ("security: [tls]\n", "security.tls.cert_file", "security", "['tls']", "1, column 1"),
    ],
)
def test_an_override_does_not_hide_a_malformed_section_of_the_file(
    tmp_path: Path, text: str, override: str, where: str, got: str, at: str
) -> None:
    """check-config refused the file, serve with a flag into the section took it: the
    override replaced the file's value, and what the file meant was gone unsaid."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(text)
    lines = error_lines(config, {override: "127.0.0.1:0"})
    assert lines[1] == (
        f"  {config} and command line/environment: {where}: expected a mapping (key: value"
        f" lines) (got {got}) (line {at})"
    )
    # A section that may be null is off when null: an override into it turns it on.
    tokens = tmp_path / "tokens"
    tokens.write_text("s3cret-token-value\n")
    config.write_text("security:\n  auth: null\n")
    loaded = load_config(config, {"security.auth.bearer_token_file": str(tokens)})
    assert loaded.security.auth is not None
