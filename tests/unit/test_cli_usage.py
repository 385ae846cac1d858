"""What ``toolwatch --help`` and its commands' help say (``toolwatch.cli_usage``): every option
explained, and every example one the command line takes."""

from __future__ import annotations

import argparse
import contextlib
import io
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
    joined = re.sub(r"\s*\\\n\s*", " ", block.removeprefix("examples:\n"))
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


def test_the_top_levels_examples_are_its_commands_own_word_for_word() -> None:
    """Was: the top level's block was a second copy of its commands' examples, its replay
    line one no command showed. Now each of its examples is taken from its command's block,
    continuation lines and note included: one command of each at least."""
    top = EXAMPLES["toolwatch"].removeprefix("examples:\n")
    examples = re.split(r"\n(?=  \S)", top.rstrip("\n"))
    shown = {}
    for example in examples:
        command = toolwatch_arguments(example.replace("\\\n", " "))[0]
        shown.setdefault(command, []).append(example)
        assert f"\n{example}\n" in EXAMPLES[command], example
    assert {command: len(lines) for command, lines in shown.items()} == {
        "serve": 3,
        "check-config": 2,
        "replay": 1,
        "tail": 1,
    }


def refused(args: list[str]) -> tuple[int, list[str]]:
    """The exit code of ``toolwatch ARGS`` refused by the parser, and what its standard error
    says after its usage (the ``error:`` line and the hints under it)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_:
        cli._parser().parse_args(args)
    said = err.getvalue().splitlines()
    errors = [at for at, line in enumerate(said) if ": error: " in line]
    return int(exit_.value.code or 0), said[errors[0] :]


@pytest.mark.parametrize(
    ("args", "unknown"),
    [
        (["tail", "--", "--jsn"], "-- --jsn"),
        (["check-config", "--", "toolwatch.yaml", "--confg"], "--confg"),
        (["serve", "--", "--confg"], "-- --confg"),
    ],
)
def test_an_argument_after_double_dash_is_not_told_as_a_mistyped_option(
    args: list[str], unknown: str
) -> None:
    """Was: ``tail -- --jsn`` was told "did you mean --json?", but after ``--`` every argument
    is a positional one (POSIX's convention, argparse's rule): ``tail -- --json`` is refused
    just the same. Now: argparse's message alone."""
    code, said = refused(args)
    assert code == 2
    assert said == [f"toolwatch {args[0]}: error: unrecognized arguments: {unknown}"]


def test_an_option_before_double_dash_is_still_told_the_closest() -> None:
    code, said = refused(["tail", "--jsn", "--", "--jsn"])
    assert code == 2
    assert said == [
        "toolwatch tail: error: unrecognized arguments: --jsn -- --jsn",
        "  --jsn: did you mean --json?",
    ]


@pytest.mark.parametrize("command", [[], ["serve"], ["check-config"], ["replay"], ["tail"]])
def test_help_fits_80_columns(command: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Was: the descriptions and examples, printed as written (``RawDescriptionHelpFormatter``
    wraps them no further), ran to 82-96 columns where ``cli_usage`` says 80, so an 80-column
    terminal broke them mid-word. Now: no line of any help is wider than 80 columns, argparse
    wrapping the options to the terminal's (COLUMNS=80)."""
    monkeypatch.setenv("COLUMNS", "80")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        cli._parser().parse_args([*command, "--help"])
    too_long = [line for line in out.getvalue().splitlines() if len(line) > 80]
    assert too_long == []


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["serve", "--tls-ca", "ca.pem"], "--tls-ca is an option of `toolwatch tail`"),
        (
            ["serve", "--version"],
            "--version is an option of `toolwatch` itself, before the command",
        ),
        (
            ["replay", "--findings", "out.jsonl", "-"],
            "--findings is an option of `toolwatch serve` and `toolwatch check-config`",
        ),
        (
            ["tail", "--tls-client-ca=ca.pem"],
            "--tls-client-ca is an option of `toolwatch serve` and `toolwatch check-config`",
        ),
        (["--json", "tail"], "--json is an option of `toolwatch tail`"),
    ],
)
def test_an_option_of_another_command_is_told_where_it_goes(args: list[str], hint: str) -> None:
    """Was: ``serve --tls-ca`` was told "did you mean --tls-cert?" (serve's CA flag is
    ``--tls-client-ca``; ``--tls-ca`` is tail's), ``replay --findings`` "did you mean
    --max-findings?", as near as anything was. Now: the command that takes it, and no
    option of the command given that is not close enough to be the one meant."""
    code, said = refused(args)
    assert code == 2
    assert said[1:] == [f"  {hint}"]


def test_each_unknown_option_is_told_with_its_own_hint_once() -> None:
    """Was: "(did you mean --config, --config?)" for ``--confg a --confg b``, and with two
    mistyped, which hint was whose was left to guess. Now: a line for each, naming it."""
    code, said = refused(["serve", "--confg", "a", "--grpc-lisen=x", "--confg", "b", "--zzz"])
    assert code == 2
    assert said == [
        "toolwatch serve: error: unrecognized arguments: --confg a --grpc-lisen=x --confg b --zzz",
        "  --confg: did you mean --config?",
        "  --grpc-lisen: did you mean --grpc-listen?",
    ]


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("--confg", "--config"),
        ("--jsn", "--json"),
        ("--fromat", "--format"),
        ("--verison", "--version"),
        ("-config", "--config"),
        ("--min-severty", "--min-severity"),
        ("--tls-ca", None),
        ("--findings", None),
        ("-j", None),
        ("--zzz", None),
    ],
)
def test_only_an_option_a_few_typos_away_is_taken_for_the_one_meant(
    typed: str, meant: str | None
) -> None:
    options = ["-h", "--help", "--config", "--json", "--format", "--version", "--min-severity"]
    options += ["--tls-cert", "--max-findings"]
    assert cli_usage.closest(typed, options) == meant


def test_what_looks_like_no_option_is_told_as_argparse_tells_it() -> None:
    """Standard input (``-``) and a stray word are no mistyped option."""
    assert cli_usage.options_given(["-", "extra", "--confg"], ["-", "extra", "--confg"]) == [
        "--confg"
    ]
    assert cli_usage.refusal(["-", "extra"], [], ["-h", "--config"], {}) == (
        "unrecognized arguments: - extra"
    )


def test_check_config_names_its_file_and_config_option_distinctly() -> None:
    """Was: ``usage: toolwatch check-config [-h] [--config FILE] ... [FILE]``, one name for
    two arguments (which argparse shows apart although one excludes the other). Now: the
    positional one is CONFIG_FILE."""
    usage = " ".join(commands()["check-config"].format_usage().split())
    assert usage.startswith("usage: toolwatch check-config [-h] [--config FILE] ")
    assert usage.endswith(" [CONFIG_FILE]")
