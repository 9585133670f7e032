"""Beat can always be stopped, and a mistake ends it with one line and exit status 2.

Real ``celery beat`` processes. The database Beat waits for is a closed port on
127.0.0.1 (refused, as a stopped PostgreSQL is); the mistakes are real ones: a
PostgreSQL database that is empty or missing, a role that does not exist, SQLite files
that are missing, read-only or at a revision this version does not know.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import URL

from celery_gaffer.store import dispose_engines, get_engine, models_for

from ..processes import CeleryProcess, celery_processes, project_env
from .project import write_project
from .test_beat_start import _free_port

pytestmark = [pytest.mark.acceptance]

# A project that only configures the Gaffer database: nothing in it touches that database.
MINIMAL_PROJECT = """
from celery import Celery
import celery_gaffer

app = Celery("proj", broker={broker!r})
app.conf.gaffer_database_url = {database!r}
{extra}
"""
INSTALL = "celery_gaffer.install(app)"
# Stop signals must end Beat this fast (the aim is well under a second).
STOP_WITHIN = 5.0


def _project(directory: Path, broker: str, database: str, extra: str = INSTALL) -> str:
    (directory / "proj.py").write_text(
        MINIMAL_PROJECT.format(broker=broker, database=database, extra=extra)
    )
    return "proj"


def _run_beat(directory: Path, module: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", module, "beat", "-S", "gaffer"],
        cwd=directory,
        env=project_env(directory),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _stop_and_time(beat: CeleryProcess, *signals: int) -> float:
    """Send ``signals`` to Beat's process (not its group: as systemd and Kubernetes do)
    and return the seconds until it exited."""
    sent = time.monotonic()
    for signum in signals:
        os.kill(beat.pid, signum)
    try:
        beat.process.wait(STOP_WITHIN + 15)
    except subprocess.TimeoutExpired:
        pytest.fail(f"Beat still runs {STOP_WITHIN + 15:g} s after {signals}:\n{beat.log()}")
    return time.monotonic() - sent


@pytest.mark.redis
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_ends_beat_while_it_waits_for_its_database(
    tmp_path: Path, redis_url: str, signum: int
) -> None:
    database = f"postgres://postgres@127.0.0.1:{_free_port()}/gaffer"  # a closed port
    module = _project(tmp_path, redis_url, database)
    with celery_processes() as started:
        beat = CeleryProcess(tmp_path, module, ["beat", "-S", "gaffer", "-l", "INFO"], "beat")
        started.append(beat)
        beat.wait_for_log("trying again in 2 s", timeout=60)  # inside the wait's backoff
        took = _stop_and_time(beat, signum)
        log = beat.log()
    assert took < STOP_WITHIN, log
    assert beat.process.returncode == 0, log
    name = signal.Signals(signum).name
    assert log.count(f"Beat stopped by {name} while waiting for the Gaffer database") == 1
    # One Scheduler, one wait: Celery's handler did not build a second one that waits again.
    assert log.count("trying again in 1 s") == 1, log
    assert "Traceback" not in log


@pytest.mark.redis
def test_signals_sent_together_end_beat_once_without_a_second_wait(
    tmp_path: Path, redis_url: str
) -> None:
    """``timeout``, honcho or a process group forward their signal next to the user's."""
    database = f"postgresql://postgres@127.0.0.1:{_free_port()}/gaffer"
    module = _project(tmp_path, redis_url, database)
    with celery_processes() as started:
        beat = CeleryProcess(tmp_path, module, ["beat", "-S", "gaffer", "-l", "INFO"], "beat")
        started.append(beat)
        beat.wait_for_log("trying again in 2 s", timeout=60)
        took = _stop_and_time(beat, signal.SIGTERM, signal.SIGTERM, signal.SIGINT)
        log = beat.log()
    assert took < STOP_WITHIN, log
    assert beat.process.returncode == 0, log
    assert log.count("trying again in 1 s") == 1, log
    assert "Traceback" not in log


@pytest.mark.postgres
@pytest.mark.redis
def test_a_stop_signal_ends_a_running_beat(
    tmp_path: Path, postgres_url: str, redis_url: str
) -> None:
    module = write_project(
        tmp_path,
        redis_url,
        postgres_url,
        extra=(
            "from celery_gaffer import every\n"
            "app.conf.beat_schedule = {'tick': {'task': 'proj.record', 'schedule': every(1)}}\n"
        ),
    )
    with celery_processes() as started:
        beat = CeleryProcess(tmp_path, module, ["beat", "-S", "gaffer", "-l", "INFO"], "beat")
        started.append(beat)
        beat.wait_for_log("sent tick@", timeout=60)
        took = _stop_and_time(beat, signal.SIGTERM)
        log = beat.log()
    assert took < STOP_WITHIN, log
    assert beat.process.returncode == 0, log
    assert "Traceback" not in log


# -- mistakes: one line on stderr, exit status 2 ---------------------------------------


def _cannot(reason: str) -> None:
    """Skip a case this machine cannot set up; under CI, where it must run, fail."""
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


@contextmanager
def _read_only(directory: Path) -> Iterator[None]:
    """Make ``directory`` and its files read-only, even for root (immutable), then back."""
    paths = [*directory.iterdir(), directory]
    if os.geteuid() != 0:
        for path in paths:
            path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            yield
        finally:
            for path in paths:
                path.chmod(0o755 if path.is_dir() else 0o644)
        return
    if shutil.which("chattr") is None:
        _cannot("running as root without chattr: cannot make a file read-only")
    made = subprocess.run(["chattr", "+i", *map(str, paths)], capture_output=True, text=True)
    if made.returncode != 0:
        _cannot(f"chattr +i is not supported here: {made.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", *map(str, paths)], check=True)


def _sqlite_copy(tmp_path: Path, template: Path) -> Path:
    folder = tmp_path / "db"
    folder.mkdir()
    path = folder / "gaffer.sqlite3"
    shutil.copyfile(template, path)
    return path


def _unmigrated(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return str(request.getfixturevalue("empty_postgres_url"))


def _missing_database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    server: URL = request.getfixturevalue("postgres_server")
    missing = server.set(database=f"gaffer_missing_{uuid.uuid4().hex[:8]}")
    return missing.render_as_string(hide_password=False)


def _unknown_role(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    server: URL = request.getfixturevalue("postgres_server")
    stranger = server.set(username=f"gaffer_nobody_{uuid.uuid4().hex[:8]}", password="Pw0rd")
    return stranger.render_as_string(hide_password=False)


def _missing_file(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'nowhere.sqlite3'}"


def _unknown_revision(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    path = _sqlite_copy(tmp_path, request.getfixturevalue("sqlite_template"))
    url = f"sqlite:///{path}"
    version_table = models_for("gaffer_").version_table
    with get_engine(URL.create("sqlite", database=str(path))).begin() as conn:
        conn.execute(text(f"UPDATE {version_table} SET version_num = 'ffffffff0000'"))
    dispose_engines()
    return url


def _read_only_file(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    path = _sqlite_copy(tmp_path, request.getfixturevalue("sqlite_template"))
    stack = ExitStack()
    stack.enter_context(_read_only(path.parent))
    request.addfinalizer(stack.close)
    return f"sqlite:///{path}"


MISTAKES: dict[str, tuple[Callable[[pytest.FixtureRequest, Path], str], tuple[str, ...]]] = {
    "unmigrated": (_unmigrated, ("is not migrated", "gaffer migrate")),
    "missing database": (_missing_database, ("does not exist", "create the database")),
    "unknown role": (_unknown_role, ("does not exist", "check the user name and password")),
    "missing SQLite file": (_missing_file, ("no Gaffer database", "gaffer migrate")),
    "unknown revision": (_unknown_revision, ("ffffffff0000", "does not know")),
    "read-only SQLite file": (_read_only_file, ("refused it", "writable")),
}


@pytest.mark.postgres
@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_a_mistake_ends_beat_with_one_line_and_status_2(
    request: pytest.FixtureRequest, tmp_path: Path, mistake: str
) -> None:
    make_url, expected = MISTAKES[mistake]
    database = make_url(request, tmp_path)
    module = _project(tmp_path, "memory://", database)
    ended = _run_beat(tmp_path, module)
    output = ended.stdout + ended.stderr
    errors = [line for line in ended.stderr.splitlines() if line.strip()]
    assert ended.returncode == 2, output
    assert len(errors) == 1, output  # the cause and the fix, once
    assert "Beat cannot start: " in errors[0]
    for words in expected:
        assert words in errors[0], errors[0]
    assert "Traceback" not in output
    assert len(ended.stdout.splitlines()) < 20  # Celery's banner, nothing more
    assert "Pw0rd" not in output


def test_an_invalid_setting_read_by_beat_ends_it_with_one_line(tmp_path: Path) -> None:
    module = _project(
        tmp_path, "memory://", "sqlite:///gaffer.sqlite3", extra="app.conf.gaffer_lease_ttl = -5"
    )
    ended = _run_beat(tmp_path, module)
    errors = [line for line in ended.stderr.splitlines() if line.strip()]
    assert ended.returncode == 2, ended.stdout + ended.stderr
    assert errors == ["Beat cannot start: gaffer_lease_ttl: must be at least 1 s, got -5"]
    assert "Traceback" not in ended.stdout


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (["beat", "-S", "gaffer"], "Beat cannot start: "),
        (["worker", "-P", "solo"], "worker cannot start: "),
        (["gaffer", "status"], "error: "),
    ],
    ids=["beat", "worker", "gaffer-status"],
)
def test_a_bad_setting_in_an_installed_app_is_one_line_never_echoing_its_password(
    tmp_path: Path, command: list[str], says: str
) -> None:
    """install(app) reads no setting while Celery imports the app (an error there is
    Celery's "Unable to load" traceback): each process ends at its first use instead,
    with one line naming the key, the password masked, and exit status 2."""
    module = _project(tmp_path, "memory://", "postgresql:/gaffer:Hunter2Secret@127.0.0.1/db")
    ended = subprocess.run(
        [sys.executable, "-m", "celery", "-A", module, *command],
        cwd=tmp_path,
        env=project_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    errors = [line for line in ended.stderr.splitlines() if line.strip()]
    assert ended.returncode == 2, ended.stdout + ended.stderr
    assert errors == [
        f"{says}gaffer_database_url: cannot parse 'postgresql:/gaffer:***@127.0.0.1/db' as a "
        "database URL; write it as postgresql://user:password@host/db or sqlite:///path"
    ]
    assert "Hunter2Secret" not in ended.stdout + ended.stderr
    assert "Traceback" not in ended.stdout + ended.stderr


def test_celery_report_shows_no_secret(tmp_path: Path) -> None:
    module = _project(
        tmp_path,
        "memory://",
        "postgres://gaffer:DbSecret77@127.0.0.1/gaffer",
        extra=(
            "app.conf.gaffer_alert_webhook_secret_url = "
            "'https://hooks.example/services/T00/B00/HookSecret99'\n"
            "app.conf.gaffer_web_token = 'WebSecret55'\n" + INSTALL
        ),
    )
    report = subprocess.run(
        [sys.executable, "-m", "celery", "-A", module, "report"],
        cwd=tmp_path,
        env=project_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.returncode == 0, report.stderr
    assert "gaffer_alert_webhook_secret_url: '********'" in report.stdout
    for secret in ("DbSecret77", "HookSecret99", "WebSecret55", "hooks.example"):
        assert secret not in report.stdout + report.stderr
