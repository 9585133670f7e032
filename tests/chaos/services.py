"""Stopping and starting this machine's PostgreSQL and Redis, as the env notes say."""

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


def restart_redis() -> None:
    subprocess.run(
        ["redis-cli", "-h", "127.0.0.1", "-p", "6379", "shutdown", "nosave"],
        check=False,
        capture_output=True,
    )
    _wait(6379, up=False)
    start_redis()


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
