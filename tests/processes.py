"""Real ``celery`` processes for acceptance tests: started, logged, always stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[1]


def project_env(project_dir: Path, **extra: str) -> dict[str, str]:
    """An environment in which ``-A <module>`` finds the test project and celery_gaffer."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join([str(project_dir), str(ROOT)])
    env["PYTHONUNBUFFERED"] = "1"
    # Output is compared: a dependency's deprecation notice is not the program's.
    env["PYTHONWARNINGS"] = "ignore::DeprecationWarning,ignore::PendingDeprecationWarning"
    env.update(extra)
    return env


class CeleryProcess:
    """A ``celery`` sub-process whose output goes to a log file in the project folder."""

    def __init__(self, project_dir: Path, module: str, args: Sequence[str], name: str) -> None:
        self.project_dir = project_dir
        self.log_path = project_dir / f"{name}.log"
        self._log: IO[bytes] = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", module, *args],
            cwd=project_dir,
            env=project_env(project_dir),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, text: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log():
                return
            if self.process.poll() is not None:
                raise AssertionError(f"process exited ({self.process.returncode}):\n{self.log()}")
            time.sleep(0.1)
        raise AssertionError(f"{text!r} not logged within {timeout}s:\n{self.log()[-5000:]}")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to the whole process group (a prefork worker's children too)."""
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)

    def stop(self, timeout: float = 20.0) -> None:
        if self.process.poll() is None:
            self.kill(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill(signal.SIGKILL)
                self.process.wait(10)
        # Children of a killed worker may outlive it; the group is ours alone.
        self.kill(signal.SIGKILL)
        if not self._log.closed:
            self._log.close()


@contextmanager
def celery_processes() -> Iterator[list[CeleryProcess]]:
    """A list to start processes into; every one is stopped on exit, pass or fail."""
    started: list[CeleryProcess] = []
    try:
        yield started
    finally:
        for process in started:
            process.stop()
