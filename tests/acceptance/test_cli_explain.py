"""`celery -A proj gaffer explain` as a user runs it: a real celery process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from celery import Celery

from celery_gaffer import ScheduleStore, cron

ROOT = Path(__file__).resolve().parents[2]


def _celery(tmp_path: Path, database: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _gaffer(tmp_path, database, "explain", *args)


def _gaffer(tmp_path: Path, database: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "proj.py").write_text(
        "from celery import Celery\n"
        "app = Celery('proj', broker='memory://')\n"
        f"app.conf.gaffer_database_url = {f'sqlite:///{database}'!r}\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", "proj", "gaffer", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _ok(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return result.stdout.splitlines()


def test_explain_a_stored_schedule_by_name(tmp_path: Path) -> None:
    database = tmp_path / "gaffer.sqlite3"
    assert _gaffer(tmp_path, database, "migrate").returncode == 0
    app = Celery("seed", set_as_current=False)
    app.conf.gaffer_database_url = f"sqlite:///{database}"
    store = ScheduleStore(app, check_tasks=False)
    store.add("nightly", "proj.nightly", cron("30 1 * * *", "Europe/London"))
    app.close()

    lines = _ok(_celery(tmp_path, database, "nightly", "--around", "2027-10-31", "--count", "4"))
    assert lines[0].startswith("nightly: cron '30 1 * * *' in Europe/London is fixed-time")
    assert lines[1].split() == ["LOCAL", "(Europe/London)", "OFFSET", "UTC"]
    fires = [line.split() for line in lines[2:] if not line.startswith("--")]
    assert fires == [
        ["Sat", "2027-10-30", "01:30", "BST", "+01:00", "2027-10-30", "00:30Z"],
        ["Sun", "2027-10-31", "01:30", "BST", "+01:00", "2027-10-31", "00:30Z"],
        ["Mon", "2027-11-01", "01:30", "GMT", "+00:00", "2027-11-01", "01:30Z"],
        ["Tue", "2027-11-02", "01:30", "GMT", "+00:00", "2027-11-02", "01:30Z"],
    ]
    [change] = [line for line in lines if line.startswith("--")]
    assert change == (
        "-- 2027-10-31: clocks go back 1 h, from 02:00 BST to 01:00 GMT; 01:30 happens twice: "
        "fires once, at the first occurrence, 01:30 BST (00:30Z) "
        "[first_occurrence: a fixed time in a fold fires once, at the first occurrence]"
    )
    # It comes after the 01:30 BST fire, before the next day's.
    assert lines.index(change) == 4

    unknown = _celery(tmp_path, database, "nope")
    assert unknown.returncode == 2
    assert unknown.stderr == "error: name: no schedule named 'nope'\n"


def test_explain_says_when_a_stored_schedule_is_paused_or_jittered(tmp_path: Path) -> None:
    database = tmp_path / "gaffer.sqlite3"
    assert _gaffer(tmp_path, database, "migrate").returncode == 0
    app = Celery("seed", set_as_current=False)
    app.conf.gaffer_database_url = f"sqlite:///{database}"
    store = ScheduleStore(app, check_tasks=False)
    store.add("spread", "proj.nightly", cron("0 3 * * *", jitter=600))
    store.add("held", "proj.nightly", cron("0 4 * * *"), gaffer={"enabled": False})
    app.close()

    spread = _ok(_celery(tmp_path, database, "spread", "--count", "1"))
    assert spread[-1] == (
        "note: jitter: each fire is sent up to 600s after the nominal time shown"
        " (the same delay every time for a given fire)"
    )
    held = _ok(_celery(tmp_path, database, "held", "--count", "1"))
    assert held[-1] == "note: held is paused: it fires these times only once resumed"
    plain = _ok(_celery(tmp_path, database, "held", "--count", "1", "--json"))
    assert (json.loads(plain[0])["enabled"], json.loads(plain[0])["jitter"]) == (False, 0.0)


def test_explain_an_expression_around_a_date_needs_no_database(tmp_path: Path) -> None:
    database = tmp_path / "never.sqlite3"
    lines = _ok(
        _celery(
            tmp_path,
            database,
            "--cron",
            "30 2 * * *",
            "--tz",
            "Europe/London",
            "--around",
            "2027-03-28",
        )
    )
    assert not database.exists()
    assert "Sun 2027-03-28 02:30 BST  +01:00  2027-03-28 01:30Z" in lines
    [change] = [line for line in lines if line.startswith("--")]
    assert change.startswith("-- 2027-03-28: clocks go forward 1 h, from 01:00 GMT to 02:00 BST")
    assert change.endswith(
        "the expression has no time in 01:00-01:59 (skipped): not affected "
        "[not_affected: the change does not touch the expression's times]"
    )
    assert (
        len(
            [
                line
                for line in lines
                if line[:3] in {"Tue", "Wed", "Thu", "Fri", "Sat", "Sun", "Mon"}
            ]
        )
        == 10
    )

    gap = _ok(
        _celery(
            tmp_path,
            database,
            "--cron",
            "0 0 * * *",
            "--tz",
            "America/Havana",
            "--around",
            "2026-03-08",
            "--count",
            "2",
        )
    )
    assert "Sun 2026-03-08 01:00 CDT  -04:00  2026-03-08 05:00Z" in gap
    assert any(
        line.endswith("[gap_end: a fixed time in a gap fires once, at the gap's end]")
        for line in gap
    )


def test_explain_json_is_one_object_with_fires_and_transitions(tmp_path: Path) -> None:
    result = _celery(
        tmp_path,
        tmp_path / "never.sqlite3",
        "--cron",
        "*/15 1 * * *",
        "--tz",
        "Australia/Lord_Howe",
        "--around",
        "2026-04-05",
        "--count",
        "8",
        "--json",
    )
    [line] = _ok(result)
    data = json.loads(line)
    assert data["name"] is None
    assert data["schedule"]["expr"] == "*/15 1 * * *"
    assert data["zone"] == "Australia/Lord_Howe"
    assert [(f["local"][11:16], f["abbreviation"]) for f in data["fires"]] == [
        ("01:00", "+11"),
        ("01:15", "+11"),
        ("01:30", "+11"),
        ("01:45", "+11"),
        ("01:30", "+1030"),
        ("01:45", "+1030"),
        ("01:00", "+1030"),
        ("01:15", "+1030"),
    ]
    assert data["fires"][4] == {
        "local": "2026-04-05T01:30:00+10:30",
        "utc": "2026-04-04T15:00:00Z",
        "offset": "+10:30",
        "abbreviation": "+1030",
    }
    [change] = data["transitions"]
    assert change["at_utc"] == "2026-04-04T15:00:00Z"
    assert (change["before_offset"], change["after_offset"], change["kind"]) == (
        "+11:00",
        "+10:30",
        "fold",
    )
    assert (change["rule"], change["affected"]) == ("every_instant", True)


def test_an_every_schedule_gets_one_dst_line(tmp_path: Path) -> None:
    lines = _ok(
        _celery(
            tmp_path,
            tmp_path / "never.sqlite3",
            "--every",
            "3600",
            "--tz",
            "Europe/London",
            "--from",
            "2027-03-27T23:30",
            "--count",
            "3",
        )
    )
    assert [line.split()[2:4] for line in lines[2:5]] == [
        ["00:00", "GMT"],
        ["02:00", "BST"],
        ["03:00", "BST"],
    ]
    assert [line for line in lines if line.startswith("DST")] == [
        "DST: intervals are elapsed seconds: DST does not affect them; 1 offset change of "
        "Europe/London in this window moves only the local times shown"
    ]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--cron", "0 0 * * *", "--tz", "Mars/Base"], "tz 'Mars/Base' is not a known IANA zone"),
        (["--cron", "61 * * * *"], "expr '61 * * * *' is invalid"),
        (["--cron", "0 0 * * *", "--every", "60"], "cron: give exactly one of"),
        ([], "cron: give exactly one of"),
        (["--cron", "0 0 * * *", "--around", "2027-02-30"], "around: '2027-02-30' is not a date"),
        (["--every", "60", "--count", "lots"], "count: must be a whole number"),
        (["nightly"], "gaffer migrate"),
        (["nightly", "--cron", "0 0 * * *"], "name: give a schedule NAME or --cron/--every"),
        (["--every", "60", "--around", "2027-01-01", "--from", "2027-01-01"], "around: give"),
    ],
)
def test_bad_input_is_one_line_naming_the_field_and_exit_2(
    tmp_path: Path, args: list[str], words: str
) -> None:
    database = tmp_path / "never.sqlite3"
    result = _celery(tmp_path, database, *args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: ")
    assert words in line
    assert result.stdout == ""
    assert not database.exists()
