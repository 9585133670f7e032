"""The chaos suite: a workload, a seeded fault schedule, and a checker.

Two Beats, two prefork workers (concurrency 2), PostgreSQL and Redis; 20 schedules of
1-3 s (half of them with a 0.5 s jitter) with catch-up ``all`` whose GafferTask writes
its effect under its fire's key, a fenced writer, and one batch job over a table of
rows. While the workload runs, a fault
driver with a seeded random schedule pauses (SIGSTOP, longer than the lease TTL) and
kills (SIGKILL) Beats and workers, and restarts Redis and PostgreSQL. Then everything is
left to drain and the checker reads the final state and prints one line of counts.

Restarting PostgreSQL and Redis stops them for everything else on this machine, so the
restart faults run only when asked: ``GAFFER_CHAOS_RESTART_SERVICES=1`` (CI sets it).
Without it a run that includes them is refused before anything starts; the faults that
touch only the suite's own processes (pauses, kills) need no permission.

    GAFFER_CHAOS_RESTART_SERVICES=1 python -m tests.chaos.run --seconds 1800 --seed 7
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import redis
from celery import Celery
from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError

from celery_gaffer import ScheduleStore, every
from celery_gaffer.protocol import fire_key
from celery_gaffer.settings import parse_database_url
from celery_gaffer.store import database_for, dispose_engines, get_engine

from .. import redis_claim
from ..processes import CeleryProcess
from ..services import REDIS_SERVER
from ..support import empty_redis
from . import services
from .project import create_tables, write_project

SCHEDULES = 20
ITEMS = 20_000
FAULTS = (
    "pause_beat",
    "pause_worker",
    "kill_worker",
    "kill_beat",
    "restart_redis",
    "restart_postgres",
    "crash_postgres",
)
# Faults that stop this machine's PostgreSQL or Redis, shared with whatever else uses them.
RESTART_FAULTS = frozenset({"restart_redis", "restart_postgres", "crash_postgres"})
RESTART_PERMISSION = "GAFFER_CHAOS_RESTART_SERVICES"


class RestartsNotAllowed(RuntimeError):
    """A chaos run asked for restart faults without ``GAFFER_CHAOS_RESTART_SERVICES=1``."""


def restarts_allowed() -> bool:
    """Whether this run may restart this machine's PostgreSQL and Redis."""
    return os.environ.get(RESTART_PERMISSION, "").strip().lower() in {"1", "true", "yes", "on"}


def check_permission(faults: tuple[str, ...]) -> None:
    """Refuse (:class:`RestartsNotAllowed`, one line saying how to ask) restart faults that
    were not allowed explicitly."""
    asked = sorted(RESTART_FAULTS.intersection(faults))
    if asked and not restarts_allowed():
        raise RestartsNotAllowed(
            f"the chaos faults {', '.join(asked)} restart this machine's PostgreSQL and Redis "
            f"(Redis without saving); set {RESTART_PERMISSION}=1 to allow it (CI does)"
        )


@dataclass
class Report:
    """The checker's counts; ``anomalies`` must be zero."""

    fires: int = 0
    effects: int = 0
    duplicate_effects: int = 0
    missing_effects: int = 0
    stale_fence_writes: int = 0
    fenced_writes: int = 0
    runs_without_final_state: int = 0
    batch_rows_not_once: int = 0
    faults: Counter[str] = field(default_factory=Counter)

    @property
    def anomalies(self) -> int:
        return (
            self.duplicate_effects
            + self.missing_effects
            + self.stale_fence_writes
            + self.runs_without_final_state
            + self.batch_rows_not_once
        )

    def line(self) -> str:
        faults = ", ".join(f"{name} {count}" for name, count in sorted(self.faults.items()))
        return (
            f"fires {self.fires}, effects {self.effects}, duplicate effects "
            f"{self.duplicate_effects}, missing effects {self.missing_effects}, stale-fence "
            f"writes accepted {self.stale_fence_writes} (of {self.fenced_writes} fenced writes), "
            f"runs without a final state {self.runs_without_final_state}, batch rows handled "
            f"more or less than once {self.batch_rows_not_once}; faults: {faults or 'none'}"
        )


def count_stale_fence_writes(database: str) -> tuple[int, int]:
    """(writes whose fence is lower than one committed before them, all fenced writes).

    ``seq`` is commit order: each write bumps one counter row in its own transaction.
    """
    with get_engine(parse_database_url(database)).connect() as conn:
        fences = [
            row[0] for row in conn.execute(text("SELECT fence FROM chaos_fenced ORDER BY seq"))
        ]
    stale, highest = 0, 0
    for fence in fences:
        if fence < highest:
            stale += 1
        highest = max(highest, fence)
    return stale, len(fences)


class Workload:
    def __init__(
        self,
        workdir: Path,
        database: str,
        broker: str,
        *,
        patch: str = "",
        database_patch: str = "",
    ) -> None:
        self.workdir = workdir
        self.database_patch = database_patch
        self.database = database
        self.broker = broker
        self.module = write_project(workdir, broker, database, patch=patch)
        self.app = Celery("chaos-client", broker=broker, set_as_current=False)
        self.app.conf.gaffer_database_url = database
        for name in ("chaos.effect", "chaos.fenced", "chaos.batch"):
            self.app.task(name=name, shared=False)(_stub)
        self.beats: list[CeleryProcess] = []
        self.workers: list[CeleryProcess] = []
        self.created: dict[str, datetime] = {}
        self._serial = itertools.count()

    def setup(self, *, schedules: int = SCHEDULES, items: int = ITEMS, fenced: bool = True) -> None:
        database_for(self.app).migrate()
        if self.database_patch:
            with database_for(self.app).begin() as conn:
                conn.execute(text(self.database_patch))
        create_tables(self.database, items)
        empty_redis(self.broker)
        store = ScheduleStore(self.app)
        for n in range(schedules):
            # Every other schedule jittered: its sends are held by the Beat that claimed
            # them, which the faults pause and kill too.
            jitter = 0.5 if n % 2 else 0.0
            stored = store.add(
                f"chaos-{n:02d}",
                "chaos.effect",
                every(1 + n % 3, jitter=jitter),
                gaffer={"catchup": "all"},
            )
            self.created[stored.name] = stored.watermark_at
        if fenced:
            store.add("chaos-fenced", "chaos.fenced", every(1), gaffer={"catchup": "latest"})
        # Scheduled, like a real batch job: a fire whose message a Redis restart lost is
        # followed by the next one, which resumes from the shared cursor.
        store.add("chaos-batch", "chaos.batch", every(10), args=["scheduled"])

    def start_beat(self) -> None:
        n = next(self._serial)
        self.beats.append(
            CeleryProcess(
                self.workdir,
                self.module,
                ["beat", "-S", "gaffer", "--loglevel=INFO", "-s", str(self.workdir / f"beat{n}")],
                f"beat{n}",
            )
        )

    def start_worker(self) -> None:
        n = next(self._serial)
        self.workers.append(
            CeleryProcess(
                self.workdir,
                self.module,
                ["worker", "--pool=prefork", "-c", "2", "-n", f"w{n}@%h", "--loglevel=INFO"],
                f"worker{n}",
            )
        )

    def start(self, beats: int = 2, workers: int = 2) -> None:
        for _ in range(beats):
            self.start_beat()
        for _ in range(workers):
            self.start_worker()
        for process in self.beats + self.workers:
            process.wait_for_log(
                "beat: Starting..." if "beat" in process.log_path.name else "ready.", 90
            )

    def stop(self) -> None:
        for process in self.beats + self.workers:
            process.kill(signal.SIGCONT)
            process.stop()

    # -- faults ---------------------------------------------------------------------

    def inject(self, fault: str, rng: random.Random) -> None:
        if fault == "pause_beat" and self.beats:
            self._pause(rng.choice(self.beats), rng)
        elif fault == "pause_worker" and self.workers:
            self._pause(rng.choice(self.workers), rng)
        elif fault == "pause_holder" and self.workers:
            self._pause(self._early_holder() or rng.choice(self.workers), rng)
        elif fault == "kill_worker" and self.workers:
            victim = rng.choice(self.workers)
            victim.kill(signal.SIGKILL)
            victim.stop()
            self.workers.remove(victim)
            self.start_worker()
        elif fault == "kill_beat" and self.beats:
            victim = rng.choice(self.beats)
            victim.kill(signal.SIGKILL)
            victim.stop()
            self.beats.remove(victim)
            self.start_beat()
        elif fault == "restart_redis":
            services.restart_redis()
        elif fault == "restart_postgres":
            services.restart_postgres()
        elif fault == "crash_postgres":
            services.restart_postgres("immediate")

    def _early_holder(self, timeout: float = 10.0) -> CeleryProcess | None:
        """The worker whose run holds the fenced writer's lease and has made at most two
        of its five writes, found within ``timeout`` (the self-test's fault: a random
        pause can miss the holder every time, and then no stale write can happen)."""
        deadline = time.monotonic() + timeout
        with get_engine(parse_database_url(self.database)).connect() as conn:
            while time.monotonic() < deadline:
                row = conn.execute(
                    text(
                        "SELECT owner, fence FROM gaffer_leases WHERE name = 'chaos-lease' "
                        "AND lease_until > now() AND owner IS NOT NULL"
                    )
                ).first()
                conn.rollback()
                if row is not None:
                    writes = conn.execute(
                        text("SELECT COUNT(*) FROM chaos_fenced WHERE fence = :fence"),
                        {"fence": row.fence},
                    ).scalar_one()
                    conn.rollback()
                    pid = int(row.owner.split(":")[-3])
                    for worker in self.workers:
                        if writes <= 2 and _in_group(pid, worker.pid):
                            return worker
                time.sleep(0.05)
        return None

    @staticmethod
    def _pause(process: CeleryProcess, rng: random.Random) -> None:
        process.kill(signal.SIGSTOP)
        time.sleep(rng.uniform(4.0, 7.0))  # longer than the 3 s lease TTL
        process.kill(signal.SIGCONT)

    # -- the checker ----------------------------------------------------------------

    def expected_keys(self, until: datetime) -> set[str]:
        keys = set()
        for name, created in self.created.items():
            interval = 1 + int(name.rsplit("-", 1)[1]) % 3
            keys |= {fire_key(name, f) for f in every(interval).fires_between(created, until)}
        return keys

    def effects(self) -> Counter[str]:
        with get_engine(parse_database_url(self.database)).connect() as conn:
            return Counter(row[0] for row in conn.execute(text("SELECT key FROM chaos_effects")))

    def check(self, until: datetime, faults: Counter[str]) -> Report:
        expected = self.expected_keys(until)
        effects = self.effects()
        database = database_for(self.app)
        runs = database.models.JobRun
        with database.read() as conn:
            unfinished = (
                conn.execute(select(runs.task_id).where(runs.state == "running")).scalars().all()
            )
        with get_engine(parse_database_url(self.database)).connect() as conn:
            not_once = conn.execute(
                text("SELECT COUNT(*) FROM chaos_items WHERE handled <> 1")
            ).scalar_one()
        stale, fenced = count_stale_fence_writes(self.database)
        return Report(
            fires=len(expected),
            effects=sum(effects[key] for key in expected),
            duplicate_effects=sum(1 for count in effects.values() if count > 1),
            missing_effects=sum(1 for key in expected if key not in effects),
            stale_fence_writes=stale,
            fenced_writes=fenced,
            runs_without_final_state=len(unfinished),
            batch_rows_not_once=int(not_once),
            faults=faults,
        )

    def quiesce(self, timeout: float = 90.0) -> None:
        """Pause every schedule, then wait until nothing is left to run: no run
        ``running``, no fire ``pending`` and no message queued or unacked, three checks
        in a row (a message queued before the pause still starts a run after it).

        Beat stays up meanwhile: it is what marks the runs of killed workers ``lost``.
        """
        store = ScheduleStore(self.app)
        for stored in store.list():
            store.pause(stored.name)
        database = database_for(self.app)
        runs, fires = database.models.JobRun, database.models.Fire
        client = redis.Redis.from_url(self.broker)
        quiet = 0
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline and quiet < 3:
                with database.read() as conn:
                    busy = (
                        conn.execute(
                            select(runs.id).where(runs.state == "running").limit(1)
                        ).first()
                        or conn.execute(
                            select(fires.id).where(fires.state == "pending").limit(1)
                        ).first()
                    )
                queued = client.llen("celery") + client.hlen("unacked")
                quiet = 0 if busy or queued else quiet + 1
                time.sleep(1)
        finally:
            client.close()

    def drained(self, until: datetime) -> bool:
        try:
            return self._drained(until)
        except DBAPIError:
            return False  # PostgreSQL is still coming back from a restart

    def _drained(self, until: datetime) -> bool:
        effects = self.effects()
        if any(key not in effects for key in self.expected_keys(until)):
            return False
        with get_engine(parse_database_url(self.database)).connect() as conn:
            if conn.execute(
                text("SELECT COUNT(*) FROM chaos_items WHERE handled = 0")
            ).scalar_one():
                return False
        return True


def _stub(*args: Any, **kwargs: Any) -> None:
    return None


def _in_group(pid: int, group: int) -> bool:
    try:
        return os.getpgid(pid) == group
    except ProcessLookupError:
        return False


def run(
    database: str,
    broker: str,
    *,
    seconds: float,
    seed: int,
    workdir: Path,
    faults: tuple[str, ...] = FAULTS,
    drain_timeout: float = 240.0,
    patch: str = "",
    database_patch: str = "",
    schedules: int = SCHEDULES,
    items: int = ITEMS,
    log: Any = print,
) -> Report:
    """Run the workload under faults for ``seconds``, drain, check; services left running.

    Raises :class:`RestartsNotAllowed` before anything starts when ``faults`` restart a
    service without the permission."""
    check_permission(faults)
    rng = random.Random(seed)
    log(f"chaos: seed {seed}, {seconds:.0f} s of faults ({', '.join(faults)})")
    workload = Workload(workdir, database, broker, patch=patch, database_patch=database_patch)
    injected: Counter[str] = Counter()
    try:
        workload.setup(schedules=schedules, items=items)
        workload.start()
        deadline = time.monotonic() + seconds
        bag: list[str] = []
        while time.monotonic() < deadline:
            time.sleep(rng.uniform(2.0, 6.0))
            if not bag:  # every kind once per round, in a seeded random order
                bag = list(faults)
                rng.shuffle(bag)
            fault = bag.pop()
            workload.inject(fault, rng)
            injected[fault] += 1
        services.ensure_running()
        for process in workload.beats + workload.workers:
            process.kill(signal.SIGCONT)
        until = datetime.now(timezone.utc) - timedelta(seconds=1)
        drain_deadline = time.monotonic() + drain_timeout
        while time.monotonic() < drain_deadline and not workload.drained(until):
            time.sleep(2)
        dispose_engines()  # connections from before the last PostgreSQL restart
        workload.quiesce()
        report = workload.check(until, injected)
    finally:
        workload.stop()
        services.ensure_running()
    log("chaos: " + report.line())
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=1800)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--database",
        default="postgresql+psycopg://postgres@127.0.0.1:5432/gaffer_chaos",
        help="a PostgreSQL database of the suite's own: dropped and created afresh",
    )
    parser.add_argument(
        "--broker",
        default=None,
        help="a Redis database the suite may empty (default: an empty one it claims on "
        "127.0.0.1:6379 and empties at the end)",
    )
    args = parser.parse_args(argv)
    try:
        check_permission(FAULTS)
    except RestartsNotAllowed as exc:
        print(f"chaos: {exc}", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1_000_000)
    fresh_database(args.database)
    workdir = Path(tempfile.mkdtemp(prefix=f"gaffer-chaos-{seed}-"))
    try:
        claim = None if args.broker else redis_claim.claim(REDIS_SERVER)
    except redis_claim.ClaimError as exc:
        print(f"chaos: {exc}", file=sys.stderr)
        return 2
    broker = args.broker if claim is None else claim.url
    if claim is not None:
        claim.keep()
    try:
        report = run(args.database, broker, seconds=args.seconds, seed=seed, workdir=workdir)
    finally:
        if claim is not None:
            claim.release()
    print(
        f"reproduce with: {RESTART_PERMISSION}=1 python -m tests.chaos.run "
        f"--seconds {args.seconds:.0f} --seed {seed}"
    )
    if report.anomalies:
        # Kept for the post-mortem: every Beat's and worker's log, and the project.
        print(f"logs kept in {workdir}")
        return 1
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


def fresh_database(database: str) -> None:
    """Drop and create ``database`` (the suite's own: never point it at real data)."""
    import psycopg

    from celery_gaffer.store import dispose_engines

    dispose_engines()
    url = parse_database_url(database)
    admin = url.set(drivername="postgresql", database="postgres").render_as_string(
        hide_password=False
    )
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{url.database}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{url.database}"')


if __name__ == "__main__":
    sys.exit(main())
