"""``schedules.explain`` against every worked example of docs/dst.md, read from the docs.

The tables of docs/dst.md's "Worked examples" are parsed here, so the docs and these
tests cannot disagree: each row's fires (local time, offset, UTC) must be exactly the
fires ``explain_around`` lists for that local day (the engine's), and its rule must be
the one ``explain`` names for that day's clock change.
"""

from __future__ import annotations

import itertools
import re
import shlex
import time
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from celery_gaffer.exceptions import GafferError, InvalidSchedule
from celery_gaffer.schedules import cron, every
from celery_gaffer.schedules.clock_changes import clock_changes
from celery_gaffer.schedules.explain import (
    RULE_TEXT,
    Explanation,
    Rule,
    explain,
    explain_around,
    parse_day,
    parse_start,
)

ROOT = Path(__file__).resolve().parents[3]
UTC = timezone.utc
SECTION = re.compile(r"^## Worked examples\n(.*?)^## ", re.DOTALL | re.MULTILINE)
HEADING = re.compile(r"^### ([A-Za-z_]+/[A-Za-z_]+),", re.MULTILINE)
ROW = re.compile(r"^\| (\d{4}-\d\d-\d\d) \| `([^`]+)` \| ([a-z-]+) \| (.+) \| `([a-z_]+)` \|$")
ITEM = re.compile(
    r"(\d\d:\d\d)([+-]\d\d:\d\d)(?: = (?:(\d{4}-\d\d-\d\d)T)?(\d\d:\d\d)Z)?(?=,|$| \.\.\.)"
)


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


@dataclass(frozen=True)
class Example:
    zone: str
    day: date
    expr: str
    kind: str
    fires: str
    rule: str

    def __str__(self) -> str:
        return f"{self.zone} {self.day} {self.expr!r}"


def examples() -> list[Example]:
    text = (ROOT / "docs" / "dst.md").read_text()
    section = SECTION.search(text)
    assert section is not None, "docs/dst.md has no 'Worked examples' section"
    found = []
    for block in re.split(r"^(?=### )", section.group(1), flags=re.MULTILINE):
        heading = HEADING.search(block)
        rows = [ROW.match(line) for line in block.splitlines() if line.startswith("| 20")]
        if heading is None:
            assert not rows, "a table of worked examples outside a zone's heading"
            continue
        assert rows, f"{heading.group(1)}: no table of examples"
        assert all(rows), f"{heading.group(1)}: a row the test cannot read"
        for row in rows:
            assert row is not None
            day, expr, kind, fires, rule = row.groups()
            found.append(
                Example(heading.group(1), date.fromisoformat(day), expr, kind, fires, rule)
            )
    return found


EXAMPLES = examples()


def test_the_docs_have_the_four_kinds_of_example_the_issue_asks_for() -> None:
    zones = {example.zone for example in EXAMPLES}
    assert {"Europe/London", "America/New_York", "Australia/Lord_Howe", "America/Havana"} <= zones
    assert len(EXAMPLES) >= 30
    assert {example.rule for example in EXAMPLES} == {
        "gap_end",
        "first_occurrence",
        "every_instant",
        "not_affected",
    }


def _day_fires(explanation: Explanation, day: date) -> list[tuple[str, str, datetime]]:
    return [
        (fire.local.strftime("%H:%M"), fire.local.strftime("%z"), fire.utc)
        for fire in explanation.fires
        if fire.local.date() == day
    ]


@pytest.mark.parametrize("example", EXAMPLES, ids=str)
def test_explain_lists_the_fires_and_names_the_rule_of_each_docs_example(
    example: Example,
) -> None:
    schedule = cron(example.expr, example.zone)
    assert ("fixed-time" if schedule.is_fixed_time else "wildcard") == example.kind
    explanation = explain_around(schedule, example.day, count=400)
    actual = _day_fires(explanation, example.day)

    cell = re.sub(r"\([^)]*\)", "", example.fires).replace("*", "").strip()
    if cell == "none":
        assert actual == []
    else:
        listed = ITEM.findall(cell)
        assert listed, f"{example}: no fire readable in {example.fires!r}"
        counted = re.search(r": (\d+) fires$", cell)
        if "..." in cell:
            assert counted is not None, f"{example}: a list with ... needs its count"
            assert len(actual) == int(counted.group(1))
        else:
            assert len(actual) == len(listed)
        for (clock, offset, day, utc_clock), (local, local_offset, instant) in zip(
            listed, actual, strict=False
        ):
            assert (clock, offset.replace(":", "")) == (local, local_offset), str(example)
            if utc_clock:
                assert instant.strftime("%H:%M") == utc_clock, str(example)
            if day:
                assert instant.date().isoformat() == day, str(example)

    [change] = [shift for shift in explanation.transitions if shift.touches(example.day)]
    assert change.rule == Rule(example.rule), f"{example}: {change.effect}"
    assert change.affected == (change.rule is not Rule.NOT_AFFECTED)


def test_the_explanation_agrees_with_the_engine_at_every_change_of_the_example_zones() -> None:
    """Whatever explain says happened (fired at the gap's end, at the first occurrence
    only, at both, not at all) is what the engine's fires show, for every change of
    2025-2027 (Apia: 2011-2013) in the docs' zones and a spread of expressions."""
    expressions = ["30 1 * * *", "0 0 * * *", "15 2 * * *", "0 * * * *", "*/15 * * * *"]
    expressions += ["*/15 1 * * *", "0,30 2 * * *", "45 1 * * *", "@daily"]
    for zone in sorted({example.zone for example in EXAMPLES}):
        year = 2011 if zone == "Pacific/Apia" else 2025
        start, end = utc(year, 1, 1), utc(year + 3, 1, 1)
        days = [
            (change.at + change.before).date()
            for change in clock_changes(ZoneInfo(zone), start, end)
        ]
        assert len(days) >= 3
        for day, expr in itertools.product(days, expressions):
            result = explain_around(cron(expr, zone), day, count=20)
            fires = {fire.utc for fire in result.fires}
            walls = {fire.local.replace(tzinfo=None) for fire in result.fires}
            assert result.transitions
            for change in result.transitions:
                first = {(m - change.before).replace(tzinfo=UTC) for m in change.matches}
                second = {(m - change.after).replace(tzinfo=UTC) for m in change.matches}
                if change.kind == "gap":
                    # The matching wall times do not exist: no fire shows them.
                    assert not walls & set(change.matches), change.effect
                if change.rule is Rule.GAP_END:
                    assert change.at in fires, change.effect
                elif change.rule is Rule.FIRST_OCCURRENCE:
                    assert first <= fires, change.effect
                    assert not second & fires, change.effect
                elif change.rule is Rule.EVERY_INSTANT and change.kind == "fold":
                    assert first | second <= fires, change.effect
                elif change.rule is Rule.NOT_AFFECTED:
                    assert not change.matches


def test_the_effect_says_what_happens_in_the_docs_terms() -> None:
    london = "Europe/London"
    [gap] = explain_around(cron("30 1 * * *", london), date(2027, 3, 28)).transitions
    assert gap.effect == (
        "2027-03-28: clocks go forward 1 h, from 01:00 GMT to 02:00 BST; 01:30 does not "
        "exist: fires once, at the gap's end, 02:00 BST (01:00Z)"
    )
    [fold] = explain_around(cron("30 1 * * *", london), date(2027, 10, 31)).transitions
    assert fold.effect == (
        "2027-10-31: clocks go back 1 h, from 02:00 BST to 01:00 GMT; 01:30 happens twice: "
        "fires once, at the first occurrence, 01:30 BST (00:30Z)"
    )
    [hourly] = explain_around(cron("0 * * * *", london), date(2027, 10, 31)).transitions
    assert hourly.effect.endswith(
        "01:00 happens twice: fires at both, 01:00 BST (00:00Z) and 01:00 GMT (01:00Z)"
    )
    [skipped] = explain_around(cron("*/15 * * * *", london), date(2027, 3, 28)).transitions
    assert skipped.effect.endswith(
        "01:00, 01:15, 01:30 and 01:45 do not exist, so they do not fire"
    )
    [ordinary] = explain_around(cron("30 2 * * *", london), date(2027, 3, 28)).transitions
    assert ordinary.effect.endswith(
        "; the expression has no time in 01:00-01:59 (skipped): not affected"
    )
    assert not ordinary.affected
    [howe] = explain_around(
        cron("15 2 * * *", "Australia/Lord_Howe"), date(2025, 10, 5)
    ).transitions
    assert howe.effect.startswith("2025-10-05: clocks go forward 30 min, from 02:00 +1030 to")
    [havana] = explain_around(cron("@daily", "America/Havana"), date(2026, 3, 8)).transitions
    assert havana.effect.endswith(
        "00:00 does not exist: fires once, at the gap's end, 01:00 CDT (05:00Z)"
    )


def test_the_rule_texts_are_the_ones_the_how_to_page_lists() -> None:
    page = (ROOT / "docs" / "how-to" / "explain.md").read_text()
    listed = dict(re.findall(r"^\| `([a-z_]+)` \| (.+?) \|$", page, re.MULTILINE))
    assert listed == {str(rule): text for rule, text in RULE_TEXT.items()}


def test_an_every_schedule_is_elapsed_time_at_every_change() -> None:
    result = explain(every(3600), utc(2027, 3, 27, 23, 30), count=4, zone="Europe/London")
    assert [fire.utc for fire in result.fires] == [utc(2027, 3, 28, h) for h in range(4)]
    assert [(f.local.strftime("%H:%M"), f.abbreviation) for f in result.fires] == [
        ("00:00", "GMT"),
        ("02:00", "BST"),
        ("03:00", "BST"),
        ("04:00", "BST"),
    ]
    [change] = result.transitions
    assert change.rule is Rule.ELAPSED
    assert not change.affected
    assert "elapsed seconds" in result.summary
    assert explain(every(60), utc(2027, 1, 1), count=2).zone == "UTC"


def test_the_json_form_has_the_documented_keys() -> None:
    result = explain_around(cron("0 0 * * *", "America/Havana"), date(2026, 3, 8), count=2)
    data = result.to_json()
    assert data["schedule"] == {
        "kind": "cron",
        "expr": "0 0 * * *",
        "tz": "America/Havana",
        "jitter": 0.0,
    }
    assert data["zone"] == "America/Havana"
    assert data["fires"] == [
        {
            "local": "2026-03-07T00:00:00-05:00",
            "utc": "2026-03-07T05:00:00Z",
            "offset": "-05:00",
            "abbreviation": "CST",
        },
        {
            "local": "2026-03-08T01:00:00-04:00",
            "utc": "2026-03-08T05:00:00Z",
            "offset": "-04:00",
            "abbreviation": "CDT",
        },
    ]
    [change] = data["transitions"]
    assert change["at_utc"] == "2026-03-08T05:00:00Z"
    assert (change["before_offset"], change["after_offset"]) == ("-05:00", "-04:00")
    assert (change["kind"], change["rule"], change["affected"]) == ("gap", "gap_end", True)
    assert change["effect"].startswith("2026-03-08: clocks go forward 1 h")


def test_around_a_date_centres_the_fires_on_its_change_and_covers_it() -> None:
    result = explain_around(cron("*/5 * * * *", "Europe/London"), date(2027, 3, 28), count=10)
    assert [fire.utc for fire in result.fires] == [
        utc(2027, 3, 28, 0, 35) + timedelta(minutes=5 * k) for k in range(10)
    ]
    [change] = result.transitions
    assert change.at == utc(2027, 3, 28, 1)
    # A day without a change: the fires around its start.
    quiet = explain_around(cron("0 12 * * *", "Europe/London"), date(2027, 6, 1), count=4)
    assert [f.local.date() for f in quiet.fires] == [date(2027, 5, d) for d in (30, 31)] + [
        date(2027, 6, 1),
        date(2027, 6, 2),
    ]
    assert quiet.transitions == ()


def test_a_listing_from_a_start_lists_fires_at_or_after_it_in_order() -> None:
    result = explain(cron("30 1 * * *", "Europe/London"), utc(2027, 3, 27, 1, 30), count=3)
    assert [fire.utc for fire in result.fires] == [
        utc(2027, 3, 27, 1, 30),
        utc(2027, 3, 28, 1, 0),
        utc(2027, 3, 29, 0, 30),
    ]


def test_clock_changes_finds_every_change_to_the_second() -> None:
    changes = clock_changes(ZoneInfo("Australia/Lord_Howe"), utc(2025, 1, 1), utc(2027, 1, 1))
    assert [(c.at, c.before, c.after, c.kind) for c in changes] == [
        (utc(2025, 4, 5, 15), timedelta(hours=11), timedelta(hours=10, minutes=30), "fold"),
        (utc(2025, 10, 4, 15, 30), timedelta(hours=10, minutes=30), timedelta(hours=11), "gap"),
        (utc(2026, 4, 4, 15), timedelta(hours=11), timedelta(hours=10, minutes=30), "fold"),
        (utc(2026, 10, 3, 15, 30), timedelta(hours=10, minutes=30), timedelta(hours=11), "gap"),
    ]
    # Africa/Monrovia's 1972 change ended off the minute.
    [monrovia] = clock_changes(ZoneInfo("Africa/Monrovia"), utc(1972, 1, 1), utc(1972, 2, 1))
    assert monrovia.at == datetime(1972, 1, 7, 0, 44, 30, tzinfo=UTC)
    assert monrovia.stretch() == "00:00-00:44:29"
    assert monrovia.clocks() == (
        "1972-01-07: clocks go forward 44 min 30 s, from 00:00 MMT to 00:44:30 GMT"
    )


def test_a_year_of_clock_changes_is_found_quickly() -> None:
    # Not a timing test: a sanity bound far above the few milliseconds it takes.
    begin = time.perf_counter()
    for zone in ("Europe/London", "Australia/Lord_Howe", "America/Havana"):
        assert len(list(clock_changes(ZoneInfo(zone), utc(2027, 1, 1), utc(2028, 1, 1)))) == 2
    assert time.perf_counter() - begin < 5


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: parse_day("2027-13-01"), "around"),
        (lambda: parse_day("tomorrow"), "around"),
        (lambda: parse_day("9999-12-31"), "around"),
        (lambda: parse_start("9999-12-31T23:59-01:00", "UTC"), "from"),
        (lambda: parse_start("soon", "UTC"), "from"),
        (lambda: explain(cron("* * * * *"), utc(2027, 1, 1), count=0), "count"),
        (lambda: explain(cron("* * * * *", "UTC"), utc(2027, 1, 1), zone="Europe/London"), "tz"),
        (lambda: explain(every(60), utc(2027, 1, 1), zone="Mars/Base"), "tz"),
        (lambda: explain(cron("* * * * *"), datetime(2027, 1, 1)), "from"),
    ],
)
def test_bad_input_is_refused_naming_the_field(call: object, field: str) -> None:
    with pytest.raises(GafferError) as raised:
        call()  # type: ignore[operator]
    assert raised.value.field == field
    assert str(raised.value).startswith(field) or f"{field} " in str(raised.value)


def test_a_start_without_an_offset_is_wall_time_in_the_zone() -> None:
    assert parse_start("2027-03-28T02:30", "Europe/London") == utc(2027, 3, 28, 1, 30)
    assert parse_start("2027-03-28 02:30Z", "Europe/London") == utc(2027, 3, 28, 2, 30)
    assert parse_start("2027-03-28", "America/New_York") == utc(2027, 3, 28, 4)
    with pytest.raises(InvalidSchedule):
        parse_start("2027-03-28", "Nowhere/Land")


CONSOLE = re.compile(
    r"^```console\n\$ (celery -A proj gaffer explain .+?)\n(.*?)^```", re.DOTALL | re.MULTILINE
)


def test_every_output_on_the_how_to_page_is_what_the_command_prints() -> None:
    """The page shows real output: each ``$ celery -A proj gaffer explain ...`` block is
    run (in process: these forms need no app or database) and compared verbatim."""
    from click.testing import CliRunner

    from celery_gaffer.cli import gaffer

    page = (ROOT / "docs" / "how-to" / "explain.md").read_text()
    blocks = CONSOLE.findall(page)
    assert len(blocks) >= 7
    for command, shown in blocks:
        args = shlex.split(command)[4:]
        result = CliRunner().invoke(gaffer, args)
        assert result.exit_code == (2 if shown.startswith("error:") else 0), result.output
        assert result.output == shown, command


@pytest.mark.parametrize(
    ("text", "first_fire"),
    [
        # 01:30 does not exist on 2027-03-28 in London: that day's fire (at the gap's end,
        # 01:00Z) is still listed, with the change.
        ("2027-03-28T01:30", datetime(2027, 3, 28, 1, 0, tzinfo=timezone.utc)),
        # 01:30 happens twice on 2027-10-31: from the first, the first occurrence fires.
        ("2027-10-31T01:30", datetime(2027, 10, 31, 0, 30, tzinfo=timezone.utc)),
        ("2027-06-01T01:30", datetime(2027, 6, 1, 0, 30, tzinfo=timezone.utc)),
    ],
)
def test_from_a_wall_time_the_clocks_skip_or_repeat_starts_at_its_earlier_instant(
    text: str, first_fire: datetime
) -> None:
    explanation = explain(
        cron("30 1 * * *", "Europe/London"), parse_start(text, "Europe/London"), count=1
    )
    assert [fire.utc for fire in explanation.fires] == [first_fire]


def test_a_gap_whose_end_is_also_a_time_of_the_expression_says_it_is_one_fire() -> None:
    explanation = explain_around(cron("0 1,2 * * *", "Europe/London"), date(2027, 3, 28), 4)
    [change] = explanation.transitions
    assert change.effect.endswith(
        "01:00 does not exist: fires once, at the gap's end, 02:00 BST (01:00Z),"
        " which is also its 02:00 fire: one fire for both"
    )
    day = [fire.utc for fire in explanation.fires if fire.local.date() == date(2027, 3, 28)]
    assert day == [datetime(2027, 3, 28, 1, 0, tzinfo=timezone.utc)]
