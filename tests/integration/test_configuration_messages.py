"""What a user sees from real ``celery`` processes when the configuration is wrong: a
mistyped key is one warning line, a missing optional dependency one line naming the
extra to install, exit status 2 and no traceback.

A missing package is made missing the way Python itself spells it: ``None`` in
``sys.modules`` makes ``import`` raise ``ModuleNotFoundError``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ..processes import project_env

PROJECT = """
import os

from celery import Celery

import celery_gaffer

app = Celery("cproj", broker="memory://")
app.conf.gaffer_database_url = os.environ["CPROJ_DATABASE"]
if os.environ.get("CPROJ_METRICS_PORT"):
    app.conf.gaffer_metrics_port = int(os.environ["CPROJ_METRICS_PORT"])
if os.environ.get("CPROJ_TYPO"):
    app.conf.gaffer_lease_tll = 30
celery_gaffer.install(app)
"""
TYPO_WARNING = (
    "app.conf:0: GafferConfigWarning: unknown setting gaffer_lease_tll "
    "(did you mean gaffer_lease_ttl?)\n"
)


def _celery(
    project: Path, *args: str, missing: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """``celery -A cproj ARGS`` in a fresh interpreter, ``missing`` not importable."""
    hide = f"sys.modules[{missing!r}] = None; " if missing else ""
    script = (
        f"import sys; {hide}sys.argv = ['celery', '-A', 'cproj', *{list(args)!r}]; "
        "from celery.__main__ import main; main()"
    )
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=project,
        env=project_env(project, CPROJ_DATABASE=f"sqlite:///{project}/g.sqlite3", **env),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "cproj.py").write_text(PROJECT)
    return tmp_path


def test_a_mistyped_key_is_one_warning_line_from_a_command(project: Path) -> None:
    done = _celery(project, "gaffer", "migrate", CPROJ_TYPO="1")
    assert done.returncode == 0, done.stderr
    assert done.stderr == TYPO_WARNING
    assert (project / "g.sqlite3").exists()


def test_beat_with_a_metrics_port_and_no_prometheus_client_names_the_extra(
    project: Path,
) -> None:
    done = _celery(
        project,
        "beat",
        "-S",
        "gaffer",
        missing="prometheus_client",
        CPROJ_METRICS_PORT="9109",
        CPROJ_TYPO="1",
    )
    assert done.returncode == 2
    assert done.stderr == (
        TYPO_WARNING + "Beat cannot start: gaffer_metrics_port: prometheus-client is not "
        "installed: pip install 'celery-gaffer[metrics]'\n"
    )
    assert "Traceback" not in done.stdout
    assert not (project / "g.sqlite3").exists()  # refused before anything started


def test_the_metrics_server_itself_raises_a_configuration_error_naming_the_field() -> None:
    script = (
        "import sys; sys.modules['prometheus_client'] = None\n"
        "from celery_gaffer import ConfigurationError\n"
        "from celery_gaffer.beat.metrics import Metrics\n"
        "try:\n"
        "    Metrics(None)\n"
        "except ConfigurationError as exc:\n"
        "    print(exc.field, exc, sep='|')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.stdout == (
        "gaffer_metrics_port|gaffer_metrics_port: prometheus-client is not installed: "
        "pip install 'celery-gaffer[metrics]'\n"
    ), done.stderr


@pytest.mark.parametrize("module", ["starlette", "jinja2", "uvicorn", "python_multipart"])
def test_the_console_without_a_package_of_the_web_extra_names_the_extra(
    project: Path, module: str
) -> None:
    done = _celery(project, "gaffer", "web", "--port", "0", missing=module)
    assert done.returncode == 2
    assert done.stderr == (
        "error: the web console needs the web extra: pip install 'celery-gaffer[web]'\n"
    )
    assert not (project / "g.sqlite3").exists()
