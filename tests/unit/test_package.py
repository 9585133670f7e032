from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import entry_points, requires, version
from pathlib import Path

from packaging.requirements import Requirement

import celery_gaffer

ROOT = Path(__file__).resolve().parents[2]


def test_version_comes_from_package_metadata() -> None:
    assert celery_gaffer.__version__ == version("celery-gaffer")


def test_package_is_typed() -> None:
    assert (Path(celery_gaffer.__file__).parent / "py.typed").is_file()


def test_gaffer_command_is_registered_for_the_celery_cli() -> None:
    commands = {ep.name: ep.value for ep in entry_points(group="celery.commands")}
    assert commands.get("gaffer") == "celery_gaffer.cli:gaffer"


_PROBE = r"""
import json, socket, sqlite3, sys
opened = []
real_connect = socket.socket.connect
def spy_connect(self, address):
    opened.append(repr(address))
    return real_connect(self, address)
socket.socket.connect = spy_connect
real_sqlite = sqlite3.connect
def spy_sqlite(*args, **kwargs):
    opened.append("sqlite:" + repr(args))
    return real_sqlite(*args, **kwargs)
sqlite3.connect = spy_sqlite

from celery import signals
from celery.utils.dispatch import Signal
def receivers():
    return {
        name: len(sig.receivers)
        for name, sig in vars(signals).items()
        if isinstance(sig, Signal)
    }
before = receivers()
import celery_gaffer
import celery_gaffer.cli, celery_gaffer.store, celery_gaffer.settings
after = receivers()
changed = {k: (before[k], after[k]) for k in before if before[k] != after[k]}
print(json.dumps({"opened": opened, "changed": changed}))
"""


def test_importing_connects_no_receiver_and_opens_no_connection() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    report = json.loads(out.strip().splitlines()[-1])
    assert report == {"opened": [], "changed": {}}


def test_install_connects_receivers_once_per_app(celery_app: object) -> None:
    from celery import signals

    before = len(signals.worker_process_init.receivers)
    celery_gaffer.install(celery_app)
    after_first = len(signals.worker_process_init.receivers)
    celery_gaffer.install(celery_app)
    assert len(signals.worker_process_init.receivers) == after_first
    assert after_first - before <= 1
    assert celery_gaffer.wiring.is_installed(celery_app)


def _requirements() -> list[Requirement]:
    return [Requirement(line) for line in requires("celery-gaffer") or []]


def _default(req: Requirement) -> bool:
    """Installed without an extra, on this Python (a floor may depend on the version)."""
    return req.marker is None or req.marker.evaluate({"extra": ""})


def test_the_products_packages_are_installed_by_default() -> None:
    default = {req.name.lower() for req in _requirements() if _default(req)}
    card = {"celery", "kombu", "redis", "sqlalchemy", "psycopg", "alembic", "tzdata", "cronsim"}
    assert card <= default, f"not installed by default: {sorted(card - default)}"


def test_a_plain_install_brings_what_kombus_redis_transport_imports() -> None:
    # kombu's Redis transport imports `packaging` (kombu 5.7) and declares it, with the
    # redis versions it supports, in its `redis` extra (celery 5.4's `redis` extra is bare
    # redis, while celery 5.4 accepts kombu 5.7); .ci/check-wheel runs it for real.
    redis_extra = [
        req
        for req in _requirements()
        if _default(req) and req.name.lower() == "kombu" and "redis" in req.extras
    ]
    assert redis_extra, "depend on kombu[redis], not bare redis"
    import kombu.transport.redis

    assert kombu.transport.redis.Transport.driver_type == "redis"
