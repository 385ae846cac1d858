"""What ``toolwatch --help`` and its commands' help say (``toolwatch.cli_usage``): every option
explained, and every example one the command line takes."""

from __future__ import annotations

import argparse
import re
import shlex

import pytest

from toolwatch import cli, cli_usage

EXAMPLES = {
    "toolwatch": cli_usage.EXAMPLES,
    "serve": cli_usage.SERVE_EXAMPLES,
    "check-config": cli_usage.CHECK_CONFIG_EXAMPLES,
    "replay": cli_usage.REPLAY_EXAMPLES,
    "tail": cli_usage.TAIL_EXAMPLES,
}


def commands() -> dict[str, argparse.ArgumentParser]:
    """Each command's parser, by name."""
    parser = cli._parser()
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def example_lines(block: str) -> list[str]:
    """The command lines of an ``examples:`` block: continuations joined, the notes after
    two spaces or more left out."""
    joined = block.removeprefix("examples:\n").replace("\\\n", " ")
    return [re.split(r"\s{2,}", line.strip())[0] for line in joined.splitlines()]


def toolwatch_arguments(line: str) -> list[str]:
    """What ``toolwatch`` is given in ``line``: its words after ``toolwatch``, up to a pipe or
    a redirection (variables set before it, and a command piped into it, left out)."""
    words = shlex.split(line)
    given = words[words.index("toolwatch") + 1 :]
    ends = [at for at, word in enumerate(given) if word in ("|", ">")]
    return given[: ends[0]] if ends else given


@pytest.mark.parametrize("command", sorted(commands()))
def test_every_option_of_every_command_says_what_it_does(command: str) -> None:
    """``replay --format`` and ``tail --min-severity`` showed only their choices."""
    unexplained = [
        action.option_strings or action.dest
        for action in commands()[command]._actions
        if not action.help
    ]
    assert unexplained == []


@pytest.mark.parametrize(
    "line", [line for block in EXAMPLES.values() for line in example_lines(block)]
)
def test_every_example_is_a_command_line_toolwatch_takes(line: str) -> None:
    args = cli._parser().parse_args(toolwatch_arguments(line))
    assert args.command in EXAMPLES


@pytest.mark.parametrize(("name", "block"), sorted(EXAMPLES.items()))
def test_a_commands_examples_run_that_command(name: str, block: str) -> None:
    used = {toolwatch_arguments(line)[0] for line in example_lines(block)}
    assert used == (set(commands()) if name == "toolwatch" else {name})


def test_an_unknown_option_is_told_with_the_closest_known_one() -> None:
    options = ["--config", "--findings", "--format", "-h"]
    assert cli_usage.unrecognized(["--confg", "x"], options) == (
        "unrecognized arguments: --confg x (did you mean --config?)"
    )
    assert cli_usage.unrecognized(["--fromat=json", "--zzz", "--findngs"], options) == (
        "unrecognized arguments: --fromat=json --zzz --findngs (did you mean --format, --findings?)"
    )


def test_what_looks_like_no_option_is_told_as_argparse_tells_it() -> None:
    """Standard input (``-``) and a stray word are no mistyped option."""
    assert cli_usage.unrecognized(["-", "extra"], ["-h", "--config"]) == (
        "unrecognized arguments: - extra"
    )
