"""The billing schedules (``app.conf.beat_schedule``) around the clock changes of 2027,
and after Beat was down: what a real Beat sends, on a virtual clock."""

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

LONDON = ZoneInfo("Europe/London")


def utc(*parts):
    return datetime(*parts, tzinfo=timezone.utc)


def test_the_nightly_reconciliation_runs_once_when_0130_does_not_exist(gaffer_beat):
    # Sunday 28 March 2027: London's clocks go from 01:00 GMT to 02:00 BST.
    gaffer_beat.start(at="2027-03-27T12:00Z")
    gaffer_beat.advance(to="2027-03-28T12:00+01:00")
    [fire] = gaffer_beat.sent_of("nightly-reconciliation")
    assert fire.task == "billing.tasks.reconcile"
    assert fire.nominal_at == utc(2027, 3, 28, 1, 0)  # 02:00 BST, when the gap ends


def test_the_nightly_reconciliation_runs_once_when_0130_happens_twice(gaffer_beat):
    # Sunday 31 October 2027: 02:00 BST goes back to 01:00 GMT; 01:30 happens twice.
    gaffer_beat.start(at="2027-10-30T12:00+01:00")
    gaffer_beat.advance(to="2027-10-31T12:00Z")
    fires = [f.nominal_at for f in gaffer_beat.sent_of("nightly-reconciliation")]
    assert fires == [utc(2027, 10, 31, 0, 30)]  # 01:30 BST, the first one only


def test_the_morning_exports_are_caught_up_after_beat_was_down_overnight(gaffer_beat):
    gaffer_beat.start(at="2027-06-07T22:00+01:00")  # a Monday evening
    # Beat is down from midnight to 09:30 on Tuesday.
    caught_up = gaffer_beat.down("2027-06-08T00:00+01:00", "2027-06-08T09:30+01:00")
    late = {f.schedule: f.nominal_at.astimezone(LONDON).strftime("%H:%M") for f in caught_up}
    # Each schedule's policy is `latest` (the default): the most recent missed fire, once.
    assert late == {
        "nightly-reconciliation": "01:30",
        "accounting-export": "06:00",
        "overdue-reminders": "08:00",
        "hourly-report": "09:00",
    }
    assert {f.sent_at for f in caught_up} == {utc(2027, 6, 8, 8, 30)}
    assert len(caught_up) == 4
