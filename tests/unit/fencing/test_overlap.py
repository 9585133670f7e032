"""The overlap lease's steps that decide without the database: which lease, whose, whether
a run skips at once, and what its end record is left to free (the statements themselves
run in tests/integration/fencing/test_overlap.py and test_lease_durability.py)."""

from __future__ import annotations

import pytest

from celery_gaffer import LeaseHeld
from celery_gaffer.fencing import overlap as overlap_module
from celery_gaffer.fencing.context import RunContext
from celery_gaffer.fencing.leases import Lease, LeaseClient
from celery_gaffer.fencing.overlap import OverlapLease, Taken, Wanted, start_can_take
from celery_gaffer.settings import GafferSettings
from celery_gaffer.store import Database

NAME = "overlap:task:t.report"


def database(url: str = "postgresql+psycopg://u@db.invalid/gaffer") -> Database:
    """A database object that is never connected to."""
    return Database(GafferSettings.from_conf({"gaffer_database_url": url}))


class Run(RunContext):
    """A run whose lease operations are recorded instead of sent: ``acquire`` fails with
    LeaseHeld as many times as ``busy`` says, then succeeds."""

    def __init__(self, busy: int = 0) -> None:
        super().__init__(database=database(), task_id="task-1", owner="me")
        self.busy = busy
        self.tried: list[tuple[str, bool]] = []
        self.released: list[Lease] = []

    def acquire(self, name: str, ttl: float, *, steal: bool = False) -> Lease:
        self.tried.append((name, steal))
        if self.busy:
            self.busy -= 1
            raise LeaseHeld(f"lease {name!r} is held by another live holder")
        lease = lease_of(name, 1)
        self.leases.append(lease)
        return lease

    def release(self, lease: Lease) -> None:
        self.released.append(lease)
        self.leases.remove(lease)


def lease_of(name: str, fence: int) -> Lease:
    return LeaseClient(database()).held(name, fence, 30.0, "me")


def test_a_policy_names_the_lease_and_only_replace_takes_it_over() -> None:
    assert Wanted.of(None) is None
    forbid = Wanted.of((NAME, "forbid"))
    replace = Wanted.of((NAME, "replace"))
    assert forbid == Wanted(NAME, "forbid")
    assert not forbid.steal
    assert replace is not None
    assert replace.steal


def test_only_a_start_record_on_postgresql_takes_the_lease() -> None:
    assert start_can_take(database())
    assert not start_can_take(database("sqlite:///gaffer.sqlite3"))


def test_the_run_owns_its_leases_as_the_owner_its_start_record_took_the_lease_for() -> None:
    taken = OverlapLease(taken=Taken(NAME, 3, "host:1:task-1:abcd", 30.0))
    assert taken.owner("host", "task-1") == "host:1:task-1:abcd"
    fresh = OverlapLease().owner("host", "task-1")
    assert fresh.startswith("host:")
    assert ":task-1:" in fresh
    assert OverlapLease().owner("host", "task-1") != fresh  # one per delivery


def test_a_run_whose_start_record_found_the_lease_held_skips_without_trying_again() -> None:
    overlap = OverlapLease(taken=Taken(NAME, None, "me", 30.0))
    run = Run()
    overlap.adopt(run)
    assert run.leases == []
    assert overlap.taken is None
    with pytest.raises(LeaseHeld):
        overlap.hold(run, Wanted(NAME, "forbid"))
    assert run.tried == []
    assert overlap.left_for_end(database()) == []  # nothing taken: nothing to free


def test_a_run_that_may_wait_tries_the_lease_again_until_it_is_free(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(overlap_module, "WAIT_STEP", 0.0)
    overlap = OverlapLease(taken=Taken(NAME, None, "me", 30.0))
    run = Run(busy=2)
    overlap.adopt(run)
    overlap.hold(run, Wanted(NAME, "forbid"), wait=60.0)
    assert run.tried == [(NAME, False)] * 3
    assert [lease.name for lease in run.leases] == [NAME]


def test_a_run_the_start_record_took_nothing_for_tries_once_and_replace_steals() -> None:
    run = Run(busy=1)
    with pytest.raises(LeaseHeld):
        OverlapLease().hold(run, Wanted(NAME, "forbid"))
    OverlapLease().hold(run, Wanted(NAME, "replace"))
    assert run.tried == [(NAME, False), (NAME, True)]


def test_a_lease_the_run_holds_already_is_not_taken_again() -> None:
    run = Run()
    run.leases.append(lease_of(NAME, 4))
    OverlapLease().hold(run, Wanted(NAME, "forbid"))
    assert run.tried == []


def test_the_end_record_is_left_the_run_s_live_leases_or_the_run_releases_them() -> None:
    overlap = OverlapLease()
    run = Run()
    batch, lost, held = lease_of("batch:x", 1), lease_of("other", 2), lease_of(NAME, 3)
    lost.lost = True  # taken over: no longer the run's to free
    run.leases.extend([batch, lost, held])
    overlap.end_run(run, end_record_frees=True)
    assert run.leases == []
    assert run.released == []
    assert overlap.left_for_end(database()) == [held, batch]
    assert overlap.left_for_end(database()) == []  # each freed once

    run.leases.extend([batch, held])
    overlap.end_run(run, end_record_frees=False)
    assert run.released == [held, batch]
    assert overlap.left_for_end(database()) == []


def test_a_lease_taken_for_a_run_whose_body_never_began_is_left_to_the_end_record() -> None:
    overlap = OverlapLease(taken=Taken(NAME, 5, "host:1:task-1:abcd", 30.0))
    (lease,) = overlap.left_for_end(database())
    assert (lease.name, lease.token, lease.owner, lease.ttl) == (NAME, 5, "host:1:task-1:abcd", 30)
    assert overlap.left_for_end(database()) == []
