"""The celerybeat-schedule reader loads what Celery's PersistentScheduler writes and
nothing else: a file naming any other callable is refused before it is called."""

from __future__ import annotations

import os
import shelve
import shlex
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from celery.beat import PersistentScheduler, ScheduleEntry
from celery.schedules import crontab, schedule

from celery_gaffer.exceptions import InvalidInput
from celery_gaffer.importers.celery_shelve import RefusedGlobal, read_entries
from celery_gaffer.importers.common import printable
from celery_gaffer.protocol import loads_json as loads


class Touch:
    """Pickles as a call of ``os.system`` that creates ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {shlex.quote(str(self.path))}",))


class Lookup:
    """Pickles as ``getattr(owner, name)``: the first step of a gadget chain."""

    def __init__(self, owner: Any, name: str) -> None:
        self.owner, self.name = owner, name

    def __reduce__(self) -> tuple[Any, ...]:
        return (getattr, (self.owner, self.name))


class Call:
    """Pickles as ``function(*args)``."""

    def __init__(self, function: Any, *args: Any) -> None:
        self.function, self.args = function, args

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.function, self.args)


def crafted(path: Path, entries: Any) -> Path:
    with shelve.open(str(path), flag="c") as db:
        db["entries"] = entries
    return path


def test_a_shelve_that_would_run_a_command_is_refused_by_name(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = crafted(tmp_path / "celerybeat-schedule", {"x": Touch(marker)})
    with pytest.raises(RefusedGlobal, match=rf"^refused to load {os.system.__module__}\.system$"):
        read_entries(path)
    assert not marker.exists()
    # The file is live: shelve's own unpickler runs the command.
    with shelve.open(str(path), flag="r") as db:
        db["entries"]
    assert marker.exists()


def test_getattr_is_loaded_only_for_zoneinfo(tmp_path: Path) -> None:
    path = crafted(tmp_path / "s", {"x": Lookup(ScheduleEntry, "__init__")})
    with pytest.raises(
        RefusedGlobal, match=r"^refused to load builtins.getattr \(for '__init__'\)$"
    ):
        read_entries(path)  # a constructor stands for the class: never the class itself
    path = crafted(tmp_path / "t", {"x": Lookup(datetime, "now")})
    with pytest.raises(RefusedGlobal, match=r"^refused to load builtins.getattr \(for 'now'\)$"):
        read_entries(path)


def test_a_shelve_written_by_celery_reads_back_whole(tmp_path: Path) -> None:
    app = Celery("shelve-test", set_as_current=False)
    app.conf.timezone = "Europe/London"
    app.conf.beat_schedule = {
        "nightly": {
            "task": "t.report",
            "schedule": crontab(minute=30, hour=3),
            "args": ["daily"],
            "options": {"queue": "reports", "expires": 600},
        },
        "often": {"task": "t.report", "schedule": timedelta(minutes=5)},
        "hourly": {
            "task": "t.report",
            "schedule": schedule(run_every=timedelta(hours=1), relative=True),
            "kwargs": {"ids": {1, 2}, "frozen": frozenset({3}), "raw": b"\x00"},
        },
    }
    path = tmp_path / "celerybeat-schedule"
    beat = PersistentScheduler(app=app, schedule_filename=str(path), lazy=False)
    beat.schedule["nightly"].last_run_at = datetime(2026, 12, 1, 3, 30, tzinfo=timezone.utc)
    beat.schedule["often"].last_run_at = datetime(2026, 12, 1, tzinfo=timezone(timedelta(hours=2)))
    beat.sync()
    beat.close()
    try:
        entries = read_entries(path)
        with shelve.open(str(path), flag="r") as db:
            plain = db["entries"]
    finally:
        app.close()
    assert set(entries) == set(plain) == {"nightly", "often", "hourly", "celery.backend_cleanup"}
    for name, entry in entries.items():
        assert isinstance(entry, ScheduleEntry)
        theirs = plain[name]
        assert (entry.name, entry.task, entry.last_run_at) == (
            theirs.name,
            theirs.task,
            theirs.last_run_at,
        )
        assert (entry.args, entry.kwargs, entry.options) == (
            theirs.args,
            theirs.kwargs,
            theirs.options,
        )
        assert entry.schedule == theirs.schedule
    assert entries["hourly"].last_run_at.tzinfo == ZoneInfo("Europe/London")
    assert entries["hourly"].kwargs == {"ids": {1, 2}, "frozen": frozenset({3}), "raw": b"\x00"}


def test_printable_escapes_control_characters_and_cuts_long_text() -> None:
    assert printable("ok name") == "ok name"
    assert printable("red\x1b[31m\r\n\x00\u2028") == "red\\x1b[31m\\x0d\\x0a\\x00\\u2028"
    shown = printable("x" * 1_000_000)
    assert shown == "x" * 200 + "…(999800 more characters)"


def test_json_depth_is_checked_before_decoding() -> None:
    loads("[" * 64 + "]" * 64, "args")
    loads('["' + "[" * 500 + '"]', "args")  # brackets in a string do not nest
    with pytest.raises(InvalidInput, match=r"^args: JSON nested deeper than 64 levels$") as info:
        loads("[" * 50_000 + "]" * 50_000, "args")
    assert info.value.field == "args"
    with pytest.raises(InvalidInput):
        loads('{"a": ' * 65 + "1" + "}" * 65, "kwargs")


@pytest.mark.parametrize(
    ("call", "refused"),
    [
        (Call(bytes, 2**33), r"^refused to load builtins\.bytes$"),
        (Call(bytearray, 2**33), r"^refused to load builtins\.bytearray of anything but bytes$"),
        (Call(schedule, timedelta(1), False, list), r"schedule with a nowfun$"),
        (Call(ScheduleEntry, *["x"] * 9), r"ScheduleEntry with 9 arguments$"),
    ],
)
def test_calls_that_would_allocate_or_call_what_the_file_picks_are_refused(
    tmp_path: Path, call: Call, refused: str
) -> None:
    path = crafted(tmp_path / "celerybeat-schedule", {"x": call})
    with pytest.raises(RefusedGlobal, match=refused):
        read_entries(path)
