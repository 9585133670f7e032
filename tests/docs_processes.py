"""The worker, Beat and console a documentation page starts: real background processes.

:class:`Background` is the :class:`~tests.docs_runner.Services` the acceptance tests
give :func:`~tests.docs_runner.run_page`.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO

#: What each long-running command logs once it is ready.
READY = {"worker": " ready.", "beat": "beat: Starting...", "web": "Gaffer console on http://"}
#: Where a page's commands reach the console it starts (replaced by the real address).
CONSOLE = "127.0.0.1:5557"
WAIT = 60.0


@dataclass
class Started:
    kind: str
    process: subprocess.Popen[bytes]
    log_path: Path
    log: IO[bytes]

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")


class Background:
    """:class:`Services` as real processes, each logging to a file in the page's folder.

    The console is started on a free port (5557 may be taken on a shared machine), and
    the page's later commands are pointed at it. Before the first command after Beat
    started, ``recorded(folder)`` is polled (at most a minute) until it is true: the
    page's next command reads what the worker and Beat did.
    """

    def __init__(self, recorded: Callable[[Path], bool] | None = None) -> None:
        self.recorded = recorded
        self.started: list[Started] = []
        self.folder: Path | None = None
        self.console: str | None = None
        self.waited = False

    def kinds(self) -> list[str]:
        return [started.kind for started in self.started]

    def start(self, command: str, folder: Path, env: dict[str, str]) -> None:
        words = shlex.split(command)
        kind = "worker" if "worker" in words else "beat" if "beat" in words else "web"
        if kind == "web":
            words += ["--port", "0"]
        log_path = folder / f"{kind}-{len(self.started) + 1}.log"
        log = log_path.open("wb")
        process = subprocess.Popen(
            words, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        started = Started(kind, process, log_path, log)
        self.started.append(started)
        self.folder = folder
        deadline = time.monotonic() + WAIT
        while READY[kind] not in started.text():
            assert process.poll() is None, f"{command} exited:\n{self.logs()}"
            assert time.monotonic() < deadline, f"{command} was not ready:\n{self.logs()}"
            time.sleep(0.1)
        if kind == "web":
            found = re.search(r"http://([\d.]+:\d+)/", started.text())
            assert found, started.text()
            self.console = found.group(1)

    def before(self, command: str) -> str:
        if self.recorded is not None and "beat" in self.kinds() and not self.waited:
            self._wait_until_recorded()
            self.waited = True
        if self.console is not None:
            command = command.replace(CONSOLE, self.console)
        return command

    def _wait_until_recorded(self) -> None:
        assert self.folder is not None
        assert self.recorded is not None
        deadline = time.monotonic() + WAIT
        while not self.recorded(self.folder):
            for started in self.started:
                assert started.process.poll() is None, f"{started.kind} exited:\n{self.logs()}"
            assert time.monotonic() < deadline, f"nothing recorded in {WAIT:.0f} s:\n{self.logs()}"
            time.sleep(0.5)

    def logs(self) -> str:
        return "\n".join(f"--- {s.log_path.name}\n{s.text()[-4000:]}" for s in self.started)

    def stop_all(self) -> None:
        # SIGTERM to each main process, which stops its own children (a worker's warm
        # shutdown), as systemd's KillMode=mixed does; what is left is killed.
        for started in self.started:
            started.process.terminate()
        for started in self.started:
            try:
                started.process.wait(20)
            except subprocess.TimeoutExpired:
                with suppress(ProcessLookupError):
                    os.killpg(started.process.pid, signal.SIGKILL)
                started.process.wait(10)
            with suppress(ProcessLookupError):  # a prefork worker's children
                os.killpg(started.process.pid, signal.SIGKILL)
            started.log.close()
