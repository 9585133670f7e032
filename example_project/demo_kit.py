"""What the demo's steps share: printing, checks, waiting, the processes, the CLI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

HERE = Path(__file__).resolve().parent
VAR = HERE / "var"
LOGS = VAR / "logs"
APP = "billing.celery_app"
T = TypeVar("T")


class DemoFailed(Exception):
    """A step's evidence did not hold (the message is the one-line reason)."""


def say(text: str = "") -> None:
    print(text, flush=True)


def heading(text: str) -> None:
    say()
    say(text)


def check(condition: bool, reason: str) -> None:
    if not condition:
        raise DemoFailed(reason)


def wait_for(what: str, probe: Callable[[], T | None], timeout: float) -> T:
    """Poll ``probe`` until it returns something truthy; DemoFailed after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise DemoFailed(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def gaffer(*args: str, show: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``celery -A billing.celery_app gaffer ARGS``, printing the command and output."""
    result = subprocess.run(
        [sys.executable, "-m", "celery", "-A", APP, "gaffer", *args],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if show:
        say(f"   $ celery -A {APP} gaffer {' '.join(args)}")
        for line in (result.stdout + result.stderr).splitlines():
            say(f"   {line}")
    return result


class Processes:
    """The demo's Beats and workers, each in a session of its own, logging to var/logs."""

    def __init__(self) -> None:
        self.running: dict[str, subprocess.Popen[bytes]] = {}
        self.paused: set[int] = set()

    def start(self, name: str, *args: str) -> None:
        with (LOGS / f"{name}.log").open("wb") as log:
            self.running[name] = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", APP, *args],
                cwd=HERE,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def log(self, name: str) -> str:
        return (LOGS / f"{name}.log").read_text(errors="replace")

    def check_alive(self) -> None:
        for name, process in self.running.items():
            if process.poll() is not None:
                raise DemoFailed(f"{name} exited early with {process.returncode} (see var/logs)")

    def pause(self, pid: int) -> None:
        os.kill(pid, signal.SIGSTOP)
        self.paused.add(pid)

    def resume(self, pid: int) -> None:
        os.kill(pid, signal.SIGCONT)
        self.paused.discard(pid)

    def stop_all(self) -> None:
        for pid in list(self.paused):
            self.resume(pid)
        for process in self.running.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.running.values():
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(5)
