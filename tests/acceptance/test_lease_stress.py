"""Eight processes contend for one fenced lease; no stale fence ever commits.

Each commit also bumps a counter row in the same transaction. That row's lock orders
the commits, so ``seq`` is commit order: a write by a stale holder committed after a
newer holder's write would show as a fence lower than one already committed before it.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import random
import signal
import time
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import text

from celery_gaffer import FenceLost, GafferTask, LeaseHeld
from celery_gaffer.settings import parse_database_url
from celery_gaffer.store import get_engine

pytestmark = pytest.mark.acceptance

PROCESSES = 8
SECONDS = 30.0
TTL = 0.5
MIN_COMMITS = 1000


def _contend(database_url: str, seed: int, until: float, total: Any, queue: Any) -> None:
    app = Celery("stress", broker="memory://", set_as_current=False)
    app.conf.gaffer_database_url = database_url
    rng = random.Random(seed)
    tally = {"commits": 0, "fence_lost": 0, "held": 0}

    @app.task(base=GafferTask, bind=True, name="stress.write", shared=False)
    def write(self: GafferTask) -> None:
        with self.lease("stress", ttl=TTL) as lease:
            for _ in range(rng.randint(1, 8)):
                with self.session() as s:
                    seq = s.execute(text("UPDATE test_seq SET n = n + 1 RETURNING n")).scalar_one()
                    s.execute(
                        text(
                            "INSERT INTO test_fenced (seq, fence, pid) VALUES (:seq, :fence, :pid)"
                        ),
                        {"seq": seq, "fence": lease.fence, "pid": seed},
                    )
                tally["commits"] += 1
                with total.get_lock():
                    total.value += 1

    # At least SECONDS of contention and MIN_COMMITS commits (a loaded machine is slower).
    while time.time() < until or (total.value < MIN_COMMITS and time.time() < until + 120):
        try:
            result = write.apply(throw=True)
            result.get()
        except FenceLost:
            tally["fence_lost"] += 1
        except LeaseHeld:
            tally["held"] += 1
            time.sleep(rng.random() * 0.02)
    queue.put(tally)


def test_eight_contenders_never_commit_a_stale_fence(postgres_url: str) -> None:
    engine = get_engine(parse_database_url(postgres_url))
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS test_fenced"))
        conn.execute(text("DROP TABLE IF EXISTS test_seq"))
        conn.execute(
            text("CREATE TABLE test_fenced (seq INTEGER PRIMARY KEY, fence INTEGER, pid INTEGER)")
        )
        conn.execute(text("CREATE TABLE test_seq (n INTEGER NOT NULL)"))
        conn.execute(text("INSERT INTO test_seq VALUES (0)"))
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    total = ctx.Value("i", 0)
    until = time.time() + SECONDS + 5  # spawn start-up counted in
    procs = [
        ctx.Process(target=_contend, args=(postgres_url, seed, until, total, queue))
        for seed in range(PROCESSES)
    ]
    for proc in procs:
        proc.start()
    # The fault: a whole process (its lease renewer too) frozen for longer than the TTL.
    rng = random.Random(1234)
    pauses = 0
    while any(proc.is_alive() for proc in procs) and queue.qsize() < len(procs):
        # The lease's holder when there is one (its owner is "host:pid:task:nonce"), so
        # that a pause really costs a lease; any contender otherwise.
        with engine.connect() as conn:
            owner = conn.execute(
                text("SELECT owner FROM gaffer_leases WHERE name = 'stress'")
            ).scalar()
        holders = [p for p in procs if owner and f":{p.pid}:" in owner and p.is_alive()]
        victim = holders[0] if holders else rng.choice(procs)
        os.kill(victim.pid, signal.SIGSTOP)
        time.sleep(TTL * rng.uniform(1.2, 2.0))
        os.kill(victim.pid, signal.SIGCONT)
        pauses += 1
        time.sleep(rng.uniform(0.1, 0.5))
    tallies = [queue.get(timeout=300) for _ in procs]
    for proc in procs:
        proc.join(30)
    with engine.connect() as conn:
        fences = [
            row[0] for row in conn.execute(text("SELECT fence FROM test_fenced ORDER BY seq"))
        ]
    stale = sum(1 for before, after in itertools.pairwise(fences) if after < before)
    commits = sum(t["commits"] for t in tallies)
    fence_lost = sum(t["fence_lost"] for t in tallies)
    print(
        f"commits {commits} (rows {len(fences)}), distinct fences {len(set(fences))}, "
        f"fence_lost {fence_lost}, pauses {pauses}, "
        f"held {sum(t['held'] for t in tallies)}, stale writes {stale}"
    )
    assert commits == len(fences)
    assert len(fences) >= MIN_COMMITS
    assert fence_lost > 0  # the pauses really did lose leases
    assert stale == 0
