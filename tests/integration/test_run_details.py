"""A run record keeps its delivery's args and kwargs and its failure's traceback, bounded,
on real SQLite and PostgreSQL: runs delivered as a worker delivers them (Celery's own
tracer), through each way a start and an end are written."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from celery.app.trace import build_tracer
from sqlalchemy import select

from celery_gaffer import GafferTask
from celery_gaffer.runs import endings
from celery_gaffer.runs.details import ARGUMENTS_LIMIT, TRACEBACK_LIMIT
from celery_gaffer.settings import forget_settings
from celery_gaffer.store import database_for

from .marks import marks_app


@pytest.fixture
def app(database_url: str) -> Iterator[Celery]:
    app = marks_app(database_url, "run-details-test")
    yield app
    app.close()


class Opaque:
    def __repr__(self) -> str:
        return "<Opaque thing>"


def deliver(app: Celery, task: Any, args: Any, kwargs: Any, **headers: Any) -> str:
    """Run ``task`` as a worker runs a delivery; its task id, once its end is written."""
    task_id = f"{task.name}-{time.monotonic_ns()}"
    tracer = build_tracer(task.name, task, app=app, eager=False)
    tracer(task_id, args, kwargs, {"id": task_id, "delivery_info": {}, **headers})
    endings.end_writer().write_in_order(lambda: None)  # the queued ends are written
    return task_id


def record(app: Celery, task_id: str) -> dict[str, Any]:
    database = database_for(app)
    runs = database.models.JobRun
    with database.read() as conn:
        query = select(runs.__table__).where(runs.task_id == task_id)
        return dict(conn.execute(query).mappings().one())


def test_a_failed_runs_record_keeps_its_args_kwargs_and_traceback(app: Celery) -> None:
    @app.task(base=GafferTask, shared=False, name="t.explode")
    def explode(account: int, *, region: str) -> None:
        raise ValueError(f"account {account} in {region} is closed")

    row = record(app, deliver(app, explode, (42,), {"region": "eu-west"}))
    assert row["state"] == "failed"
    assert row["args"] == [42]
    assert row["kwargs"] == {"region": "eu-west"}
    assert row["error_type"] == "ValueError"
    assert "in explode" in row["traceback"]
    assert row["traceback"].rstrip().endswith("ValueError: account 42 in eu-west is closed")


def test_a_scheduled_runs_end_and_a_leased_runs_start_keep_them_too(app: Celery) -> None:
    @app.task(base=GafferTask, shared=False, name="t.leased", gaffer_overlap="forbid")
    def leased(day: str) -> None:
        raise KeyError(day)

    fire = {
        "gaffer_schedule": "nightly",
        "gaffer_nominal_at": "2026-12-01T02:00:00Z",
        "gaffer_key": "nightly@2026-12-01T02:00:00Z",
    }
    row = record(app, deliver(app, leased, ("2026-12-01",), {}, **fire))
    assert (row["state"], row["schedule"]) == ("failed", "nightly")
    assert (row["args"], row["kwargs"]) == (["2026-12-01"], {})
    assert row["traceback"].rstrip().endswith("KeyError: '2026-12-01'")


def test_a_succeeded_run_keeps_its_arguments_and_no_traceback(app: Celery) -> None:
    @app.task(base=GafferTask, shared=False, name="t.fine")
    def fine(*args: Any, **kwargs: Any) -> None:
        pass

    given = ([1, "two", {"three": 3.5}, None], True)
    row = record(app, deliver(app, fine, given, {"nested": {"list": [1, 2]}, "flag": False}))
    assert row["state"] == "succeeded"
    assert row["args"] == [[1, "two", {"three": 3.5}, None], True]
    assert row["kwargs"] == {"nested": {"list": [1, 2]}, "flag": False}
    assert row["traceback"] is None


def test_long_or_unencodable_arguments_and_a_long_traceback_are_kept_bounded(app: Celery) -> None:
    @app.task(base=GafferTask, shared=False, name="t.deep")
    def deep(*args: Any, **kwargs: Any) -> None:
        try:
            raise ValueError("y" * 20_000)  # a traceback far longer than the limit
        except ValueError as exc:
            raise RuntimeError("the bottom") from exc

    row = record(app, deliver(app, deep, ("x" * 20_000,), {"thing": Opaque(), "nan": float("nan")}))
    assert row["state"] == "failed"
    assert row["args"] == {"truncated": True, "preview": '["' + "x" * (ARGUMENTS_LIMIT - 2)}
    assert row["kwargs"] == {"repr": "{'thing': <Opaque thing>, 'nan': nan}"}
    kept = row["traceback"]
    assert len(kept) <= TRACEBACK_LIMIT
    first, _, rest = kept.partition("\n")
    assert first.startswith("… ")
    assert first.endswith(" characters cut …")
    cut = int(first.split()[1])
    assert cut > 0
    assert "in deep" in rest
    assert "direct cause" in rest
    assert rest.rstrip().endswith("RuntimeError: the bottom")


def test_a_retried_runs_record_keeps_the_traceback_of_the_error_it_retries(app: Celery) -> None:
    @app.task(base=GafferTask, bind=True, shared=False, name="t.flaky", max_retries=3)
    def flaky(self: GafferTask, n: int) -> None:
        try:
            raise TimeoutError(f"upstream {n} timed out")
        except TimeoutError as exc:
            raise self.retry(exc=exc, countdown=60) from exc

    row = record(app, deliver(app, flaky, (3,), {}))
    assert row["state"] == "retrying"
    assert row["args"] == [3]
    assert row["error_type"] == "TimeoutError"
    assert "TimeoutError: upstream 3 timed out" in row["traceback"]


def test_with_gaffer_run_arguments_false_a_record_keeps_no_arguments(database_url: str) -> None:
    app = marks_app(database_url, "run-details-no-arguments")
    app.conf.gaffer_run_arguments = False
    forget_settings(app)  # read again, with the key
    try:

        @app.task(base=GafferTask, shared=False, name="t.secret")
        def reset_password(email: str, *, token: str) -> None:
            raise ValueError("mail server down")

        row = record(app, deliver(app, reset_password, ("a@example.com",), {"token": "s3cret"}))
        assert row["state"] == "failed"
        assert (row["args"], row["kwargs"]) == (None, None)
        assert row["traceback"] is not None  # the failure is still kept
    finally:
        app.close()


def test_gaffer_run_arguments_must_be_true_or_false() -> None:
    from celery_gaffer.exceptions import ConfigurationError
    from celery_gaffer.settings import GafferSettings

    with pytest.raises(ConfigurationError, match=r"^gaffer_run_arguments: expected True or False"):
        GafferSettings.from_conf({"gaffer_run_arguments": "no"})
