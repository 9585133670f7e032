"""What the CLI prints of users' and the database's text: control characters escaped, long
values cut saying how much was left out."""

from __future__ import annotations

import pytest

from celery_gaffer.cli.base import (
    COLUMN_WIDTH,
    LINE_LIMIT,
    VALUE_LIMIT,
    cell_text,
    echo,
    one_line,
    printable,
    table,
)


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("plain name", "plain name"),
        ("red\x1b[31mname", "red\\x1b[31mname"),
        ("title\x1b]0;owned\x07", "title\\x1b]0;owned\\x07"),
        ("tab\tnew\nline\rcr", "tab\\x09new\\x0aline\\x0dcr"),
        ("nul\x00del\x7f", "nul\\x00del\\x7f"),
        ("csi\x9b2J", "csi\\x9b2J"),
        ("bidi\u202eevil\u2066", "bidi\\u202eevil\\u2066"),
        ("line\u2028sep", "line\\u2028sep"),
        ("café ☕ 東京", "café ☕ 東京"),
    ],
)
def test_control_characters_are_shown_escaped_and_the_rest_as_is(raw: str, shown: str) -> None:
    assert printable(raw) == shown


def test_a_long_value_is_cut_saying_how_much_was_left_out() -> None:
    assert (
        printable("x" * 1_000_000)
        == "x" * VALUE_LIMIT + f"…({1_000_000 - VALUE_LIMIT} more characters)"
    )
    assert printable("abcdef", limit=3) == "abc…(3 more characters)"
    assert printable("x" * 5000, limit=None) == "x" * 5000
    assert printable(12) == "12"


def test_a_message_becomes_one_printable_line_with_each_long_word_cut() -> None:
    name = "n" * 1_000_000
    line = one_line(f"name: {name!r} is not a schedule\nsee\x1b[2J `gaffer schedules`")
    assert line.startswith("name: 'nnn")
    assert f"…({1_000_002 - VALUE_LIMIT} more characters) is not a schedule see\\x1b[2J" in line
    assert len(line) < VALUE_LIMIT + 100
    many = one_line(" ".join(["word"] * 10_000))
    assert len(many) < LINE_LIMIT + 40
    assert many.endswith(f"…({10_000 * 5 - 1 - LINE_LIMIT} more characters)")


def test_echo_keeps_the_layout_and_escapes_the_rest(capsys: pytest.CaptureFixture[str]) -> None:
    echo("updated x:\n  name:\tred\x1b[31m -> blue\x9b")
    assert capsys.readouterr().out == "updated x:\n  name:\tred\\x1b[31m -> blue\\x9b\n"
    echo("error in \x1b[31m", err=True)
    assert capsys.readouterr().err == "error in \\x1b[31m\n"


def test_cells_are_escaped_before_they_are_fitted_to_the_column() -> None:
    assert cell_text("a\x1bb") == "a\\x1bb"
    assert len(cell_text("\x1b" * 100)) == COLUMN_WIDTH
    assert cell_text("\x1b" * 100).endswith("…")
    assert (
        cell_text("k" * 5000, None) == "k" * LINE_LIMIT + f"…({5000 - LINE_LIMIT} more characters)"
    )


def test_tables_escape_every_cell_and_stay_aligned(capsys: pytest.CaptureFixture[str]) -> None:
    table(
        ("NAME", "KEY", "REASON"),
        [("red\x1b[31m", "red\x1b[31m@2026-12-01T01:30:00Z", "boom\r\nfake line")],
        last_wide=True,
    )
    header, row = capsys.readouterr().out.splitlines()
    assert "\x1b" not in row
    assert row.split() == [
        "red\\x1b[31m",
        "red\\x1b[31m@2026-12-01T01:30:00Z",
        "boom\\x0d\\x0afake",
        "line",
    ]
    assert header.index("KEY") == row.index("red\\x1b[31m@")
