"""The Django example project (``example_project/django_shop``) as its README runs it.

A copy of the project in a folder of its own, every command a real subprocess with this
interpreter: ``manage.py check`` is clean, ``manage.py migrate`` and ``manage.py gaffer
migrate`` create the shop's tables and Gaffer's in the one database of
``DATABASES["default"]`` (``CELERY_GAFFER_DATABASE_URL = "django://default"``), and a
real worker on the embedded filesystem broker runs the keyed ``ship_order`` task, which
writes with the Django ORM inside ``self.atomic()``: the same message sent twice ships
the order once, and the second run is recorded ``duplicate``. On SQLite (the project's
default) and on PostgreSQL (``SHOP_DATABASE_URL``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine
from sqlalchemy.pool import NullPool

from ..processes import CeleryProcess, project_env

pytestmark = [pytest.mark.acceptance]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "example_project" / "django_shop"
TIMEOUT = 120.0
T = TypeVar("T")


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh copy of the example project, with the environment its README assumes."""
    folder = tmp_path / "django_shop"
    shutil.copytree(
        EXAMPLE, folder, ignore=shutil.ignore_patterns("var", "__pycache__", "*.sqlite3*")
    )
    for name in ("CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE", "SHOP_VAR", "SHOP_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    return folder


def manage(shop: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python manage.py ARGS`` in the project; AssertionError with its output if it fails."""
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=shop,
        env=project_env(shop),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, (
        f"manage.py {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    )
    return done


def poll(what: str, probe: Callable[[], T | None], log: Callable[[], str]) -> T:
    deadline = time.monotonic() + TIMEOUT
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; worker log:\n{log()[-6000:]}")
        time.sleep(0.2)


@pytest.fixture
def engine_for() -> Iterator[Callable[[str], Engine]]:
    engines: list[Engine] = []

    def make(url: str) -> Engine:
        engines.append(create_engine(url, poolclass=NullPool))
        return engines[-1]

    yield make
    for engine in engines:
        engine.dispose()


def ships_once(shop: Path, engine: Engine) -> None:
    check = manage(shop, "check")
    assert "System check identified no issues" in check.stdout, check.stdout + check.stderr
    manage(shop, "migrate", "--no-input")
    manage(shop, "gaffer", "migrate")
    # The database checks (Gaffer's tables missing or behind) are clean once migrated.
    checked = manage(shop, "check", "--database", "default")
    assert "System check identified no issues" in checked.stdout, checked.stdout + checked.stderr

    created = manage(
        shop,
        "shell",
        "-c",
        "from orders.models import Order; print(Order.objects.create(customer='ada').pk)",
    )
    order_id = int(created.stdout.strip().splitlines()[-1])

    worker = CeleryProcess(
        shop, "shop", ["worker", "--pool", "solo", "--loglevel", "INFO", "-n", "shop@%h"], "worker"
    )
    try:
        worker.wait_for_log("ready.", timeout=TIMEOUT)
        # The same message twice, as a broker redelivers it: two task ids, one key.
        manage(
            shop,
            "shell",
            "-c",
            "from orders.tasks import ship_order; "
            f"ship_order.apply_async(({order_id},)); ship_order.apply_async(({order_id},))",
        )

        def ended() -> list[str] | None:
            with engine.connect() as conn:
                states = sorted(
                    conn.scalars(
                        text(
                            "SELECT state FROM gaffer_job_runs WHERE task_name = :name "
                            "AND finished_at IS NOT NULL"
                        ),
                        {"name": "orders.tasks.ship_order"},
                    )
                )
            return states if len(states) >= 2 else None

        states = poll("two ended runs of ship_order", ended, worker.log)
    finally:
        worker.stop()
    assert states == ["duplicate", "succeeded"], (states, worker.log()[-6000:])
    with engine.connect() as conn:
        shipments = conn.scalar(
            text("SELECT count(*) FROM orders_shipment WHERE order_id = :id"), {"id": order_id}
        )
        status = conn.scalar(
            text("SELECT status FROM orders_order WHERE id = :id"), {"id": order_id}
        )
        key_state = conn.scalar(
            text("SELECT state FROM gaffer_keys WHERE key = :key"),
            {"key": f"order.shipped:{order_id}"},
        )
    assert (shipments, status, key_state) == (1, "shipped", "completed")
    # The project's own tests, under Django's test runner, on a test database of its own.
    tested = manage(shop, "test", "orders", "--no-input")
    assert "OK" in tested.stderr, tested.stdout + tested.stderr


def test_a_duplicate_delivery_ships_the_order_once_on_sqlite(
    shop: Path, engine_for: Callable[[str], Engine]
) -> None:
    ships_once(shop, engine_for(f"sqlite:///{shop / 'var' / 'shop.sqlite3'}"))


@pytest.mark.postgres
def test_a_duplicate_delivery_ships_the_order_once_on_postgresql(
    shop: Path,
    engine_for: Callable[[str], Engine],
    empty_postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SHOP_DATABASE_URL", empty_postgres_url)
    ships_once(shop, engine_for(empty_postgres_url))
