"""Stopping and starting this machine's PostgreSQL and Redis, as the env notes say.

Only the chaos run's restart faults call the restarts, and only with
``GAFFER_CHAOS_RESTART_SERVICES=1`` (tests/chaos/run.py checks it first).
"""

from __future__ import annotations

import glob
import os
import subprocess
import time


def _port_open(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _wait(port: int, up: bool, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _port_open(port) == up:
            return
        time.sleep(0.2)
    raise RuntimeError(f"port {port} did not come {'up' if up else 'down'} in {timeout}s")


def _postgres_version() -> str:
    versions = sorted(os.path.basename(p) for p in glob.glob("/etc/postgresql/*"))
    if not versions:
        raise RuntimeError("no PostgreSQL cluster under /etc/postgresql")
    return versions[0]


def start_redis() -> None:
    if _port_open(6379):
        return
    os.makedirs("/var/lib/redis", exist_ok=True)
    os.makedirs("/var/log/redis", exist_ok=True)
    subprocess.run(
        [
            "redis-server",
            "--daemonize",
            "yes",
            "--bind",
            "127.0.0.1",
            "-::1",
            "--port",
            "6379",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            "/var/lib/redis",
            "--logfile",
            "/var/log/redis/ci.log",
        ],
        check=True,
    )
    _wait(6379, up=True)


def _claims() -> dict[int, tuple[bytes, int]]:
    """Every test run's claim on a Redis database: number -> (owner, milliseconds left)."""
    import redis

    from ..redis_claim import OWNER_KEY

    found: dict[int, tuple[bytes, int]] = {}
    for number in range(16):
        client = redis.Redis(host="127.0.0.1", port=6379, db=number, socket_timeout=5)
        try:
            owner, left = client.get(OWNER_KEY), client.pttl(OWNER_KEY)
        except redis.ResponseError:
            break  # a server configured with fewer databases
        finally:
            client.close()
        if owner is not None and left > 0:
            found[number] = (owner, left)
    return found


def _restore(claims: dict[int, tuple[bytes, int]]) -> None:
    import redis

    from ..redis_claim import OWNER_KEY

    for number, (owner, left) in claims.items():
        with redis.Redis(host="127.0.0.1", port=6379, db=number, socket_timeout=5) as client:
            client.set(OWNER_KEY, owner, px=left)


def restart_redis() -> None:
    """Restart Redis without saving (its data is lost, as in a crash), then put back the
    test runs' claims on their databases so that no other run claims them meanwhile."""
    claims = _claims()
    subprocess.run(
        ["redis-cli", "-h", "127.0.0.1", "-p", "6379", "shutdown", "nosave"],
        check=False,
        capture_output=True,
    )
    _wait(6379, up=False)
    start_redis()
    _restore(claims)


def start_postgres() -> None:
    if _port_open(5432):
        return
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", _postgres_version(), "main", "start"],
        check=True,
    )
    _wait(5432, up=True)


def restart_postgres(mode: str = "fast") -> None:
    """Restart the server: ``fast`` shuts it down cleanly; ``immediate`` kills it without a
    shutdown checkpoint, as a crash does (commits that did not wait for the disk, such as
    lease statements and run records, can be lost; crash recovery runs on start)."""
    subprocess.run(
        [
            "pg_ctlcluster",
            "--skip-systemctl-redirect",
            _postgres_version(),
            "main",
            "restart",
            "-m",
            mode,
        ],
        check=True,
        capture_output=True,
    )
    _wait(5432, up=True)
    time.sleep(1)  # accepting connections, not only listening


def ensure_running() -> None:
    """Leave both services as the suite found them: running."""
    start_postgres()
    start_redis()
