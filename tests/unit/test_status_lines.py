"""The lines of ``gaffer status``: the JSON exactly as ``json.dumps`` wrote it before, the
text table laid out as :func:`celery_gaffer.cli.base.table` lays it out, streamed."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from celery_gaffer.beat.health import Health
from celery_gaffer.cli.status_lines import BATCH, HEADER, Formats, status_json, table_lines

UTC = timezone.utc
AT = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def health(name: str, state: str, **facts: object) -> Health:
    values: dict[str, object] = {
        "due_nominal_at": None,
        "last_success_at": None,
        "last_success_nominal_at": None,
        "next_fire_at": AT + timedelta(hours=1),
        "consecutive_failures": 0,
    }
    values.update(facts)
    return Health(schedule=name, state=state, **values)  # type: ignore[arg-type]


def test_a_json_line_is_what_json_dumps_writes_for_every_state_and_name() -> None:
    formats = Formats()
    cases = [
        health("plain", "ok", last_success_at=AT),
        health('quote " and \\ back\nline', "ok"),
        health("émigré 東京 \u202e", "late", due_nominal_at=AT - timedelta(hours=1)),
        health("failing", "failing", consecutive_failures=4, last_success_at=AT),
        health("broken", "error", next_fire_at=None, error="task: 'x' is not registered"),
        health("resting", "paused", next_fire_at=None),
    ]
    for case in cases * 2:  # the second time, from the memo
        line = formats.json_line(case)
        assert line == json.dumps(status_json(case))
        assert json.loads(line)["schedule"] == case.schedule


def test_schedules_sharing_a_timing_keep_their_own_names_and_last_successes() -> None:
    formats = Formats()
    first = formats.json_line(health("a", "ok", last_success_at=AT))
    second = formats.json_line(health("b", "ok", last_success_at=AT + timedelta(seconds=1)))
    assert json.loads(first)["schedule"] == "a"
    assert json.loads(second) == {
        **json.loads(first),
        "schedule": "b",
        "last_success_at": "2026-06-01T12:00:01+00:00",
    }


def test_the_table_aligns_on_its_first_batch_and_a_later_long_cell_widens_only_its_line() -> None:
    rows = [("s1", "ok", "-", "-", "0", "")] + [("s", "ok", "-", "-", "0", "")] * (BATCH - 1)
    rows.append(("a-much-longer-name", "late", "-", "-", "0", "why"))
    lines = list(table_lines(iter(rows)))
    assert lines[0] == "  ".join(
        [h.ljust(w) for h, w in zip(HEADER[:-1], (8, 5, 12, 8, 8), strict=True)] + ["REASON"]
    )
    assert lines[1] == "s1        ok     -             -         0"
    assert lines[-1] == "a-much-longer-name  late   -             -         0         why"
    assert len(lines) == len(rows) + 1


def test_cells_escape_control_characters_and_cut_long_names() -> None:
    formats = Formats(in_utc=True)
    row = {"schedule": '{"kind": "every", "interval": 60}'}
    cells = formats.cells(row, health("bad\x1b[31mname" + "x" * 60, "ok"))
    assert "\x1b" not in cells[0]
    assert cells[0].startswith("bad\\x1b[31m")
    assert len(cells[0]) == 50
    assert cells[0].endswith("…")
