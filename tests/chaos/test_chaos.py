"""The chaos suite's short form (CI) and proof that its checker catches a broken fence.

The long form is ``make chaos`` (30 minutes, seed printed); see docs/reliability.md. The
short run restarts this machine's PostgreSQL and Redis, so it fails at once, saying how to
ask, unless ``GAFFER_CHAOS_RESTART_SERVICES=1`` (CI sets it); the self-test only pauses the
suite's own workers and always runs. Both use the test run's own Redis database.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from .project import NO_FENCE_CHECK, NO_FENCE_CHECK_SQL, django_writer
from .run import FAULTS, RestartsNotAllowed, check_permission, fresh_database, run

# Faults, then up to 4 minutes of draining: more than pytest-timeout's default 600 s.
# Not in the default run (`-m "not chaos"` in pyproject): `make chaos-short` runs them.
pytestmark = [pytest.mark.acceptance, pytest.mark.chaos, pytest.mark.timeout(1500)]

SHORT_SECONDS = float(os.environ.get("GAFFER_CHAOS_SECONDS", "180"))


def _refusal(faults: tuple[str, ...]) -> str:
    try:
        check_permission(faults)
    except RestartsNotAllowed as exc:
        return str(exc)
    return ""


def _database(postgres_server: URL, name: str) -> str:
    url = postgres_server.set(database=name).render_as_string(hide_password=False)
    fresh_database(url)
    return url


def test_short_chaos_run_has_no_anomalies(
    tmp_path: Path, postgres_server: URL, redis_url: str
) -> None:
    refused = _refusal(FAULTS)
    if refused:
        pytest.fail(refused, pytrace=False)
    seed = int(os.environ.get("GAFFER_CHAOS_SEED", random.SystemRandom().randrange(1_000_000)))
    lines: list[str] = []
    report = run(
        _database(postgres_server, "gaffer_chaos_ci"),
        redis_url,
        seconds=SHORT_SECONDS,
        seed=seed,
        workdir=tmp_path,
        log=lines.append,
    )
    print("\n".join(lines))
    assert report.fires > 100
    assert sum(report.faults.values()) >= 10
    assert set(report.faults) == set(FAULTS) or SHORT_SECONDS < 120
    assert (
        report.duplicate_effects,
        report.missing_effects,
        report.stale_fence_writes,
        report.runs_without_final_state,
        report.batch_rows_not_once,
    ) == (0, 0, 0, 0, 0), f"seed {seed}: {report.line()}"


@pytest.mark.parametrize("patched", [True, False], ids=["fence-check-patched-out", "real"])
def test_pausing_the_lease_holder_makes_stale_writes_only_without_the_fence_check(
    tmp_path: Path, postgres_server: URL, redis_url: str, patched: bool
) -> None:
    """The checker's self-test: a paused holder's late writes are counted when the fence
    check is patched out, and the real fence check refuses every one of them."""
    lines: list[str] = []
    report = run(
        _database(postgres_server, "gaffer_chaos_broken"),
        redis_url,
        seconds=60,
        seed=11,
        workdir=tmp_path,
        faults=("pause_holder",),
        patch=NO_FENCE_CHECK if patched else "",
        database_patch=NO_FENCE_CHECK_SQL if patched else "",
        schedules=0,
        items=0,
        drain_timeout=30,
        log=lines.append,
    )
    print("\n".join(lines))
    assert report.fenced_writes > 0
    if patched:
        assert report.stale_fence_writes > 0, report.line()
    else:
        assert report.stale_fence_writes == 0, report.line()


@pytest.mark.parametrize("patched", [True, False], ids=["fence-check-patched-out", "real"])
def test_a_paused_holder_writing_through_djangos_orm_in_atomic_makes_no_stale_write(
    tmp_path: Path, postgres_server: URL, redis_url: str, patched: bool
) -> None:
    """The same pauses, with chaos.fenced writing through Django's connection inside
    ``self.atomic()``: the seal on Django's transaction refuses every late write, and with
    the fence check patched out the pauses do make late writes (so they hit the window)."""
    lines: list[str] = []
    database = _database(postgres_server, "gaffer_chaos_django")
    report = run(
        database,
        redis_url,
        seconds=60,
        seed=11,
        workdir=tmp_path,
        faults=("pause_holder",),
        patch=django_writer(database) + (NO_FENCE_CHECK if patched else ""),
        database_patch=NO_FENCE_CHECK_SQL if patched else "",
        schedules=0,
        items=0,
        drain_timeout=30,
        log=lines.append,
    )
    print("\n".join(lines))
    assert report.fenced_writes > 0
    if patched:
        assert report.stale_fence_writes > 0, report.line()
    else:
        assert report.stale_fence_writes == 0, report.line()
