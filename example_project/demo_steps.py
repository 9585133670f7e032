"""The demo's six steps: each acts, then prints and checks evidence read back from the
Gaffer database (``gaffer_fires``, ``gaffer_job_runs``, ``gaffer_leases``, the billing
tables), the Beats' logs or the ``celery gaffer`` CLI."""

from __future__ import annotations

import re
from collections import Counter
from datetime import date, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

from billing.celery_app import NIGHTLY_RECONCILIATION, app
from billing.models import Invoice, MonthTotal, Payment
from billing.seed import seed
from billing.tasks import close_month, settle
from demo_kit import Processes, check, gaffer, heading, say, wait_for
from sqlalchemy import func, select

from celery_gaffer.beat.health import all_health
from celery_gaffer.store import database_for

FINISHED = ("succeeded", "failed", "duplicate", "skipped", "fence_lost", "revoked", "lost")


class Steps:
    def __init__(self, processes: Processes) -> None:
        self.processes = processes
        self.database = database_for(app)
        self.models = self.database.models

    def seed(self) -> int:
        return seed()

    # -- reading the evidence ------------------------------------------------------------

    def rows(self, query: Any) -> list[Any]:
        with self.database.read() as conn:
            return list(conn.execute(query))

    def runs_of(
        self, *, task_ids: list[str] | None = None, schedule: str | None = None
    ) -> list[Any]:
        run = self.models.JobRun
        query = select(run).order_by(run.id)
        if task_ids is not None:
            query = query.where(run.task_id.in_(task_ids))
        if schedule is not None:
            query = query.where(run.schedule == schedule)
        return self.rows(query)

    def count(self, query: Any) -> int:
        return int(self.rows(query)[0][0])

    def ended(self, schedule: str, runs: int) -> list[Any] | None:
        """The runs of ``schedule`` once there are ``runs`` of them and all have ended."""
        found = self.runs_of(schedule=schedule)
        return found if len(found) == runs and all(r.state in FINISHED for r in found) else None

    def finished(self, task_ids: list[str]) -> list[Any] | None:
        runs = self.runs_of(task_ids=task_ids)
        done = [r for r in runs if r.state in FINISHED]
        return done if len(done) == len(task_ids) else None

    # -- 1 -------------------------------------------------------------------------------

    def two_beats(self) -> None:
        heading("1. Two Beats at once: each fire is sent once")
        say("   beat-1 and beat-2 both run 'bank-feed' (every 1 s) against one ledger.")
        fire, run = self.models.Fire, self.models.JobRun
        wait_for(
            "10 runs of bank-feed, their fires marked sent",
            lambda: (
                self.count(
                    select(func.count()).where(
                        run.schedule == "bank-feed", run.state == "succeeded"
                    )
                )
                >= 10
                # A worker may run a fire before its Beat marks it sent.
                and self.count(
                    select(func.count()).where(
                        fire.schedule == "bank-feed", fire.state != "pending"
                    )
                )
                >= 10
            ),
            45,
        )
        # Fires marked sent: their Beat logged the send before marking them.
        fires = self.rows(
            select(fire.key, fire.nominal_at, fire.publish_count).where(
                fire.schedule == "bank-feed", fire.state != "pending"
            )
        )
        runs_per_fire = Counter(
            row.nominal_at
            for row in self.rows(select(run.nominal_at).where(run.schedule == "bank-feed"))
        )
        sends = {beat: Counter(self.sent_keys(beat)) for beat in ("beat-1", "beat-2")}
        senders = [sum(sends[beat][f.key] for beat in sends) for f in fires]
        sent_twice = sum(1 for count in senders if count > 1)
        ran = [runs_per_fire[f.nominal_at] for f in fires if runs_per_fire[f.nominal_at]]
        say(
            f"   gaffer_fires: {len(fires)} fires, one row per nominal time, "
            f"publish_count {'/'.join(sorted({str(f.publish_count) for f in fires}))}"
        )
        counts = ", ".join(
            f"{beat} sent {sum(1 for f in fires if sends[beat][f.key])}" for beat in sends
        )
        say(f"   Beat logs: {counts}: {sum(senders)} sends, {sent_twice} fires sent twice")
        say(f"   gaffer_job_runs: {len(ran)} of them ran, {sum(1 for n in ran if n > 1)} ran twice")
        check(len(fires) >= 10, f"step 1: only {len(fires)} fires in the ledger")
        check(all(f.publish_count == 1 for f in fires), "step 1: a fire was published twice")
        check(all(count == 1 for count in senders), "step 1: a fire is not sent exactly once")
        check(all(n == 1 for n in ran) and len(ran) >= 10, "step 1: a fire ran twice")
        say(f"   => {len(fires)} fires, {sum(senders)} sends, 0 doubles")

    def sent_keys(self, beat: str) -> list[str]:
        return re.findall(r"sent (bank-feed@\S+) ", self.processes.log(beat))

    # -- 2 -------------------------------------------------------------------------------

    def duplicate(self) -> None:
        heading("2. A duplicate delivery, suppressed by its key")
        say("   A client sends settle(11) twice (a retry after a timeout, say);")
        say("   the task's key is 'invoice.settled:{invoice_id}'.")
        task_ids = [settle.delay(11).id, settle.delay(11).id]
        runs = wait_for("both settle runs to end", lambda: self.finished(task_ids), 20)
        for ordinal, task_id in zip(("1st", "2nd"), task_ids, strict=True):
            r = next(r for r in runs if r.task_id == task_id)
            say(f"   {ordinal} send: run {task_id[:8]}  {r.state:<10} key {r.key}")
        payments = self.count(select(func.count()).where(Payment.invoice_id == 11))
        say(f"   billing_payments rows for invoice 11: {payments}")
        check(
            sorted(r.state for r in runs) == ["duplicate", "succeeded"],
            f"step 2: settle runs ended {[r.state for r in runs]}, not succeeded + duplicate",
        )
        check(all(r.key == "invoice.settled:11" for r in runs), "step 2: a run lacks its key")
        check(payments == 1, f"step 2: invoice 11 has {payments} payments")
        say("   => one payment: the other delivery found the key taken and ended 'duplicate'")

    # -- 3 -------------------------------------------------------------------------------

    def overlap(self) -> None:
        name = "nightly-reconciliation"
        heading(f"3. An overlap skip: {name} has overlap='forbid'")
        gaffer("trigger", name)
        wait_for(
            "the reconciliation to start",
            lambda: [r for r in self.runs_of(schedule=name) if r.state == "running"],
            20,
        )
        say("   ... and again, while that run is still going:")
        gaffer("trigger", name)
        runs = wait_for(
            "both reconciliation runs to end",
            lambda: self.ended(name, 2),
            30,
        )
        for r in runs:
            items = "-" if r.items is None else r.items
            say(f"   run {r.task_id[:8]}  {name}  {r.state:<10} items {items}")
        today = date.today()
        due_open = self.count(
            select(func.count()).where(Invoice.status == "open", Invoice.due_on <= today)
        )
        not_due = self.count(select(func.count()).where(Invoice.due_on > today))
        say(f"   billing_invoices: {due_open} due and still open; {not_due} fall due later")
        check(
            [r.state for r in runs] == ["succeeded", "skipped"],
            f"step 3: the runs ended {[r.state for r in runs]}, not succeeded then skipped",
        )
        check(due_open == 0 and (runs[0].items or 0) > 0, "step 3: due invoices left open")
        say("   => the second run was skipped, not run alongside the first")

    # -- 4 -------------------------------------------------------------------------------

    def fence(self) -> None:
        month = (date.today().replace(day=1) - timedelta(days=1)).strftime("%Y-%m")
        lease_name = f"close:{month}"
        heading(f"4. A fenced write refused after a pause (close_month, lease '{lease_name}')")
        lease = self.models.Lease
        first = close_month.delay(month, 2.0).id
        held_by_a = select(lease).where(lease.name == lease_name, lease.owner.contains(first))
        holder = wait_for("run A to take the lease", lambda: self.rows(held_by_a), 20)[0]
        # Frozen at once, in its sleep before any transaction: a process frozen inside a
        # SQLite write transaction would keep the database's one write lock from everyone.
        pid = int(holder.owner.rsplit(":", 3)[1])
        self.processes.pause(pid)
        say(
            f"   run A {first[:8]} holds it (fence {holder.fence}, ttl 3 s) in worker process {pid}"
        )
        say(f"   kill -STOP {pid}: run A is frozen before its write; its lease expires")
        wait_for(
            "run A's lease to expire",
            lambda: (
                self.rows(select(lease.lease_until).where(lease.name == lease_name))[0][0]
                < datetime.now(timezone.utc) - timedelta(seconds=0.2)
            ),
            10,
        )
        second = close_month.delay(month).id
        wait_for("run B to end", lambda: self.finished([second]), 20)
        self.processes.resume(pid)
        say(f"   run B {second[:8]} takes the lease over and writes the total; kill -CONT {pid}")
        runs = wait_for("run A to end", lambda: self.finished([first, second]), 20)
        for label, r in zip("AB", runs, strict=True):
            say(f"   run {label} {r.task_id[:8]}  fence {r.fence}  {r.state}")
        say(f"   run A's error: {runs[0].error_type}: {runs[0].error_message}")
        totals = self.rows(select(MonthTotal).where(MonthTotal.month == month))
        for t in totals:
            say(f"   billing_month_totals {t.month}: written by {t.task_id[:8]} at fence {t.fence}")
        check(
            [r.state for r in runs] == ["fence_lost", "succeeded"],
            f"step 4: runs A, B ended {[r.state for r in runs]}, not fence_lost, succeeded",
        )
        check(
            len(totals) == 1 and totals[0].task_id == second,
            "step 4: the month's total is not run B's alone",
        )
        check(runs[1].fence > runs[0].fence, "step 4: run B's fence is not above run A's")
        say("   => run A's write after the pause was refused; the stored total is run B's")

    # -- 5 -------------------------------------------------------------------------------

    def explain(self) -> None:
        name = "nightly-reconciliation"
        schedule = NIGHTLY_RECONCILIATION["schedule"]
        zone = ZoneInfo(schedule.tz)
        day = next_dst_change(zone, date.today())
        heading(f"5. {name} ({schedule.expr!r} in {zone.key}) across its next DST change")
        start = datetime(day.year, day.month, day.day, tzinfo=zone) - timedelta(days=1)
        fires = [
            f.astimezone(zone) for f in schedule.fires_between(start, start + timedelta(days=3))
        ]
        if gaffer("explain", "--help", show=False).returncode == 0:
            result = gaffer("explain", name, "--around", day.isoformat(), "--count", "3")
            check(result.returncode == 0, f"step 5: gaffer explain exited {result.returncode}")
            check(day.isoformat() in result.stdout, f"step 5: explain does not show {day}")
        else:  # a celery-gaffer without `gaffer explain`: the schedule's own fires
            say("   (this celery-gaffer has no `gaffer explain`; the schedule's fires:)")
            for fire in fires:
                say(f"   {fire:%a %Y-%m-%d %H:%M %Z}  = {fire.astimezone(timezone.utc):%H:%MZ}")
        on_the_day = [f for f in fires if f.date() == day]
        check(len(on_the_day) == 1, f"step 5: {len(on_the_day)} fires on {day}, not one")
        fire = on_the_day[0]
        say(
            f"   => {fires[0]:%H:%M} local on other days; on {day} once, at "
            f"{fire:%H:%M %Z} ({fire.astimezone(timezone.utc):%H:%MZ})"
        )

    # -- 6 -------------------------------------------------------------------------------

    def late_then_ok(self) -> None:
        name = "accounting-export"
        heading(f"6. gaffer status: {name} late, then recovered")
        say(f"   {name} (every 5 s, grace 3 s) is routed to queue 'accounting': no worker yet.")
        before = gaffer("status")
        check(
            before.returncode == 1 and re.search(rf"^{name}\s+late\b", before.stdout, re.M),
            f"step 6: status did not show {name} late with exit 1 (exit {before.returncode})",
        )
        self.processes.start(
            "accounting-worker",
            *("worker", "-Q", "accounting", "-n", "accounting@%h", "--pool=solo"),
            "--loglevel=INFO",
        )
        say("   Started a worker for queue 'accounting'; it works off the queued fires.")
        wait_for("accounting-export to recover", lambda: self.health(name) == "ok", 40)
        after = gaffer("status")
        check(
            after.returncode == 0 and re.search(rf"^{name}\s+ok\b", after.stdout, re.M),
            f"step 6: status did not show {name} ok with exit 0 (exit {after.returncode})",
        )
        say("   => late (exit 1) -> ok (exit 0)")

    def health(self, name: str) -> str | None:
        with self.database.read() as conn:
            healths = all_health(
                conn, self.models, datetime.now(timezone.utc), self.database.settings
            )
        return next((h.state for h in healths if h.schedule == name), None)


def next_dst_change(zone: ZoneInfo, today: date) -> date:
    """The first day after ``today`` whose noon has another UTC offset than the day before."""
    noon = datetime(today.year, today.month, today.day, 12, tzinfo=zone)
    for days in range(1, 400):
        before, after = noon + timedelta(days=days - 1), noon + timedelta(days=days)
        if before.utcoffset() != after.utcoffset():
            return after.date()
    raise ValueError(f"no DST change in {zone.key} within a year")
