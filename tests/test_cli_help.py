"""`mce --help` and every command's --help read as prose: a docstring's line breaks
are the source file's, not the reader's, so each paragraph reaches the terminal as
one line and the terminal wraps it at its own width."""

from __future__ import annotations

import typer.main
from typer.testing import CliRunner

from mce_dagster.cli import app
from mce_dagster.cli._output import prose

# Wide enough that a paragraph written as one line is rendered on one line.
WIDE = {"COLUMNS": "2000"}


def every_command():
    """(words of the command line, Click command) for `mce` and each group and command."""

    def walk(command, path=()):
        yield path, command
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, (*path, name))

    return list(walk(typer.main.get_command(app)))


def rendered_lines(path) -> list[str]:
    result = CliRunner().invoke(app, [*path, "--help"], env=WIDE)
    assert result.exit_code == 0, result.output
    # Drop the panels' borders; keep the text between them.
    return [" ".join(line.strip(" │╭╮╰╯─").split()) for line in result.output.splitlines()]


def test_prose_joins_the_lines_of_a_paragraph_and_keeps_the_paragraphs():
    assert prose("One line\n    and the next.\n\n    A second\n    paragraph.") == "One line and the next.\n\nA second paragraph."
    assert prose("\b\nkept\nas written") == "\b\nkept\nas written"
    assert prose(None) is None


def test_the_walk_sees_every_command():
    names = {" ".join(path) for path, _ in every_command()}
    assert {"", "ingest", "compute", "export", "report", "kg", "kg check", "kg metric get", "prices show"} <= names


def test_every_help_paragraph_is_one_line():
    for path, command in every_command():
        assert command.help, f"mce {' '.join(path)} has no help"
        for paragraph in command.help.split("\n\n"):
            assert "\n" not in paragraph, f"mce {' '.join(path)}: {paragraph!r}"


def test_every_help_renders_each_paragraph_unbroken():
    for path, command in every_command():
        lines = rendered_lines(path)
        for paragraph in command.help.split("\n\n"):
            assert paragraph in lines, f"mce {' '.join(path)} --help breaks {paragraph[:60]!r}...:\n" + "\n".join(lines)


def test_a_group_lists_each_command_by_its_first_paragraph_on_one_line():
    for path, group in every_command():
        if not hasattr(group, "commands"):
            continue
        lines = rendered_lines(path)
        for name, sub in group.commands.items():
            summary = sub.help.split("\n\n")[0]
            assert f"{name} {summary}" in lines, f"mce {' '.join(path)} --help lists {name} as:\n" + "\n".join(lines)
            # A summary is one sentence that fits a terminal line beside its name.
            assert len(summary) <= 100, f"{name}: {summary!r}"
