"""Schedule maths: celery-gaffer's cron against croniter and Celery's crontab.

    .venv/bin/python benchmarks/schedules.py           # about a minute
    .venv/bin/python benchmarks/schedules.py --quick   # fewer repetitions

Speed (median of several runs, same machine, same process):

* ``next_after`` of a daily fixed-time expression (``30 2 * * *``, America/New_York) from
  2,000 random instants of 2026. croniter is measured two ways: ``croniter(expr,
  t).get_next()`` (the same question: "next after t", a new iterator each time) and
  ``it.get_next()`` on one iterator (stepping from the previous result, its cheapest
  use). Celery's crontab: ``last, delta, _ = c.remaining_delta(t)`` and ``last + delta``,
  which is how its ``remaining_estimate`` finds the next run (``nowfun`` fixed, so no
  clock reads are counted).
* every fire of ``*/5 * * * *`` in America/New_York over a year (105,120 fires):
  gaffer's ``fires_between``; croniter's ``get_next`` on one iterator; crontab stepped
  with the ``remaining_delta`` arithmetic above from each result to the next.

Correctness: windows of one day either side of every transition of 2010-2030 in a dozen
zones, for fixed-time and wildcard expressions; each library's fires in the window are
compared with the brute-force oracle of tests/dst/oracle.py (DESIGN.md's DST table). A
case is wrong when the lists differ or the library raised. cronsim's own zone mode (which
celery-gaffer does not use) is shown too.

croniter is installed for benchmarking only; it is not a dependency of celery-gaffer.
Exits 1 when gaffer's next_after is more than 2x croniter's get_next.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from celery import Celery  # noqa: E402
from celery.schedules import crontab  # noqa: E402
from cronsim import CronSim  # noqa: E402

from celery_gaffer.schedules import cron  # noqa: E402

UTC = timezone.utc
NY = "America/New_York"
DAILY = "30 2 * * *"
FIVE_MINUTES = "*/5 * * * *"
CORRECTNESS_ZONES = [
    "America/New_York",
    "Europe/London",
    "Europe/Dublin",
    "Australia/Sydney",
    "Australia/Lord_Howe",
    "Pacific/Apia",
    "Pacific/Chatham",
    "America/Sao_Paulo",
    "America/Havana",
    "America/St_Johns",
    "Africa/Casablanca",
    "Asia/Tehran",
]
CORRECTNESS_EXPRESSIONS = [
    "30 2 * * *",
    "30 1 * * *",
    "15 2 * * *",
    "0 0 * * *",
    "0,30 2 * * *",
    "0 * * * *",
    "*/15 * * * *",
    "*/20 1-3 * * *",
    "*/10 3 * * *",
]


def load_oracle() -> Any:
    spec = importlib.util.spec_from_file_location("dst_oracle", ROOT / "tests/dst/oracle.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def import_croniter() -> Any:
    try:
        from croniter import croniter
    except ImportError:
        sys.exit("croniter is needed for this benchmark: .venv/bin/pip install croniter")
    return croniter


def celery_crontab(expr: str, zone: str) -> crontab:
    """Celery's crontab for a five-field expression, evaluated in ``zone`` (the app's)."""
    app = Celery("bench", set_as_current=False)
    app.conf.timezone = zone
    minute, hour, day_of_month, month_of_year, day_of_week = expr.split()
    return crontab(
        minute=minute,
        hour=hour,
        day_of_week=day_of_week,
        day_of_month=day_of_month,
        month_of_year=month_of_year,
        app=app,
        nowfun=lambda: datetime(2026, 1, 1, tzinfo=UTC),
    )


def crontab_next(schedule: crontab, after: datetime) -> datetime:
    """The next run after ``after`` as Celery computes it in ``remaining_estimate``."""
    last, delta, _now = schedule.remaining_delta(after)
    result: datetime = (last + delta).astimezone(UTC)
    return result


# -- speed ----------------------------------------------------------------------------


def per_call(run: Callable[[], int], repeats: int) -> float:
    """Median seconds per item over ``repeats`` runs; ``run`` returns how many it did."""
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        count = run()
        samples.append((time.perf_counter() - started) / count)
    return statistics.median(samples)


def bench_next_after(repeats: int) -> dict[str, float]:
    croniter = import_croniter()
    rng = random.Random(2026)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    moments = [start + timedelta(seconds=rng.randrange(365 * 86400)) for _ in range(2000)]
    local = [m.astimezone(ZoneInfo(NY)) for m in moments]
    gaffer = cron(DAILY, NY)
    celery = celery_crontab(DAILY, NY)

    def run_gaffer() -> int:
        for moment in moments:
            gaffer.next_after(moment)
        return len(moments)

    def run_croniter_new() -> int:
        for moment in local:
            croniter(DAILY, moment).get_next(datetime)
        return len(local)

    def run_croniter_step() -> int:
        iterator = croniter(DAILY, local[0])
        for _ in range(len(local)):
            iterator.get_next(datetime)
        return len(local)

    def run_crontab() -> int:
        for moment in local:
            crontab_next(celery, moment)
        return len(local)

    return {
        "gaffer next_after(t)": per_call(run_gaffer, repeats),
        "croniter(expr, t).get_next()": per_call(run_croniter_new, repeats),
        "croniter it.get_next()": per_call(run_croniter_step, repeats),
        "crontab remaining_delta(t)": per_call(run_crontab, repeats),
    }


def bench_year(repeats: int) -> tuple[dict[str, float], dict[str, int]]:
    croniter = import_croniter()
    zone = ZoneInfo(NY)
    start = datetime(2026, 1, 1, tzinfo=zone)
    end = datetime(2027, 1, 1, tzinfo=zone)
    gaffer = cron(FIVE_MINUTES, NY)
    celery = celery_crontab(FIVE_MINUTES, NY)
    counts: dict[str, int] = {}

    def run_gaffer() -> int:
        counts["gaffer"] = sum(1 for _ in gaffer.fires_between(start, end))
        return 1

    def run_croniter() -> int:
        iterator, count = croniter(FIVE_MINUTES, start), 0
        while iterator.get_next(datetime) <= end:
            count += 1
        counts["croniter"] = count
        return 1

    def run_crontab() -> int:
        here, count, end_utc = start.astimezone(UTC), 0, end.astimezone(UTC)
        while (here := crontab_next(celery, here)) <= end_utc:
            count += 1
        counts["crontab"] = count
        return 1

    timings = {
        "gaffer fires_between": per_call(run_gaffer, repeats),
        "croniter get_next loop": per_call(run_croniter, repeats),
        "crontab remaining_delta loop": per_call(run_crontab, repeats),
    }
    return timings, counts


# -- correctness ----------------------------------------------------------------------

LIMIT = 2000  # fires per window; more means a library is stuck


def gaffer_fires(expr: str, zone: str, start: datetime, end: datetime) -> list[datetime]:
    return list(cron(expr, zone).fires_between(start, end))


def _stepped(
    step: Callable[[datetime], datetime], start: datetime, end: datetime
) -> list[datetime]:
    fires, here = [], start
    for _ in range(LIMIT):
        following = step(here)
        if following <= here:  # not moving forward: it would loop for ever
            raise RuntimeError(f"stuck at {here}")
        if following > end:
            return fires
        fires.append(following)
        here = following
    raise RuntimeError("too many fires")


def croniter_fires(expr: str, zone: str, start: datetime, end: datetime) -> list[datetime]:
    croniter = import_croniter()
    iterator = croniter(expr, start.astimezone(ZoneInfo(zone)))
    return _stepped(lambda _: iterator.get_next(datetime).astimezone(UTC), start, end)


def crontab_fires(expr: str, zone: str, start: datetime, end: datetime) -> list[datetime]:
    schedule = celery_crontab(expr, zone)
    return _stepped(lambda here: crontab_next(schedule, here), start, end)


def cronsim_fires(expr: str, zone: str, start: datetime, end: datetime) -> list[datetime]:
    iterator: Iterator[datetime] = CronSim(expr, start.astimezone(ZoneInfo(zone)))
    return _stepped(lambda _: next(iterator).astimezone(UTC), start, end)


LIBRARIES: dict[str, Callable[[str, str, datetime, datetime], list[datetime]]] = {
    "celery-gaffer": gaffer_fires,
    "croniter": croniter_fires,
    "celery crontab": crontab_fires,
    "cronsim (own zone mode)": cronsim_fires,
}


def check_correctness(oracle: Any) -> tuple[int, dict[str, int], dict[str, list[str]]]:
    wrong = dict.fromkeys(LIBRARIES, 0)
    examples: dict[str, list[str]] = {name: [] for name in LIBRARIES}
    cases = 0
    for zone in CORRECTNESS_ZONES:
        transitions = oracle.find_transitions(
            ZoneInfo(zone),
            datetime(2010, 1, 1, tzinfo=UTC),
            datetime(2031, 1, 1, tzinfo=UTC),
            timedelta(hours=6),
        )
        for transition in transitions:
            start, end = transition - timedelta(days=1), transition + timedelta(days=1)
            for expr in CORRECTNESS_EXPRESSIONS:
                cases += 1
                expected = oracle.expected_fires(expr, zone, start, end)
                for name, fires in LIBRARIES.items():
                    try:
                        ok = fires(expr, zone, start, end) == expected
                    except Exception:  # noqa: BLE001 - a library that raises got it wrong
                        ok = False
                    if not ok:
                        wrong[name] += 1
                        if len(examples[name]) < 2:
                            examples[name].append(f"{expr!r} {zone} around {transition:%Y-%m-%d}")
    return cases, wrong, examples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    options = parser.parse_args()
    repeats_fast, repeats_year = (3, 1) if options.quick else (9, 3)

    print(f"Python {sys.version.split()[0]}; medians of {repeats_fast} (year: {repeats_year}) runs")
    print(f"\nnext_after of {DAILY!r} in {NY}, per call:")
    calls = bench_next_after(repeats_fast)
    gaffer = calls["gaffer next_after(t)"]
    for name, seconds in calls.items():
        print(f"  {name:34} {seconds * 1e6:8.1f} us   gaffer/this = {gaffer / seconds:5.2f}")

    print(f"\nevery fire of {FIVE_MINUTES!r} in {NY} over 2026:")
    year, counts = bench_year(repeats_year)
    gaffer_year = year["gaffer fires_between"]
    for name, seconds in year.items():
        print(f"  {name:34} {seconds:8.3f} s    gaffer/this = {gaffer_year / seconds:5.2f}")
    print(f"  fires counted: {counts}")

    print("\nDST correctness against tests/dst/oracle.py (2010-2030, +-1 day windows):")
    cases, wrong, examples = check_correctness(load_oracle())
    zones, expressions = len(CORRECTNESS_ZONES), len(CORRECTNESS_EXPRESSIONS)
    print(f"  {cases} cases = transitions in {zones} zones x {expressions} expressions")
    for name, count in wrong.items():
        print(f"  {name:26} wrong in {count:5} ({count / cases:6.1%})   e.g. {examples[name]}")

    target = calls["croniter it.get_next()"] * 2
    met = gaffer <= target
    print(f"\ntarget: gaffer next_after <= 2x croniter get_next: {'met' if met else 'MISSED'}")
    return 0 if met and wrong["celery-gaffer"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
