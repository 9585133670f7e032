"""What a schedule's page adds: the next clock change of its zone and the fires it marks."""

from __future__ import annotations

from datetime import datetime, timezone

from celery_gaffer import cron, every
from celery_gaffer.schedules.explain import explain
from celery_gaffer.web.schedule_page import next_clock_change, run_strip, upcoming

UTC = timezone.utc


def test_the_next_clock_change_is_found_months_ahead_with_its_effect() -> None:
    december = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)
    change = next_clock_change(cron("30 2 * * *", "Europe/Berlin"), december)
    assert change is not None
    assert change.effect == (
        "2027-03-28: clocks go forward 1 h, from 02:00 CET to 03:00 CEST; 02:30 does not "
        "exist: fires once, at the gap's end, 03:00 CEST (01:00Z)"
    )
    unaffected = next_clock_change(cron("0 12 * * *", "Europe/Berlin"), december)
    assert unaffected is not None
    assert not unaffected.affected


def test_zones_without_clock_changes_have_none() -> None:
    now = datetime(2026, 12, 5, tzinfo=UTC)
    assert next_clock_change(cron("30 2 * * *", "Asia/Tokyo"), now) is None
    assert next_clock_change(cron("30 2 * * *"), now) is None
    assert next_clock_change(every(60), now) is None
    assert next_clock_change(None, now) is None


def test_a_fire_in_a_fold_is_marked_as_the_first_of_two() -> None:
    sydney = cron("30 2 * * *", "Australia/Sydney")
    fires = upcoming(explain(sydney, datetime(2027, 4, 2, tzinfo=UTC), 4))
    marked = [(fire.utc, fire.moved) for fire in fires if fire.moved]
    assert marked == [
        (
            datetime(2027, 4, 3, 15, 30, tzinfo=UTC),
            "02:30 AEDT, repeated time: fires at the first only, clock change",
        )
    ]
    assert "happens twice" in next(fire.effect for fire in fires if fire.moved)


def test_a_fire_in_a_gap_is_marked_with_where_it_moves() -> None:
    berlin = cron("30 2 * * *", "Europe/Berlin")
    fires = upcoming(explain(berlin, datetime(2027, 3, 26, 12, tzinfo=UTC), 4))
    assert [fire.moved for fire in fires] == ["", "02:30 → 03:00 CEST, clock change", "", ""]
    assert upcoming(None) == []


def test_the_strip_puts_the_newest_run_on_the_right() -> None:
    at = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    newest_first = [
        {"id": 9, "state": "failed", "nominal_at": at, "duration": 75.0},
        {"id": 4, "state": "succeeded", "nominal_at": None, "started_at": None},
    ]
    strip = run_strip(newest_first)
    assert [block.id for block in strip] == [4, 9]
    assert strip[0].label == "run 4: succeeded, -"
    assert strip[1].label == "run 9 at 2026-06-01 12:00Z: failed, 1m 15s"
