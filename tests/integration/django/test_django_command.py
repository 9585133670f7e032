"""``manage.py gaffer ...`` and the Gaffer app's system checks, with real Django."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from celery_gaffer.contrib.django.checks import check_configuration, check_tables
from celery_gaffer.contrib.django.conf import celery_app
from celery_gaffer.contrib.django.management.commands.gaffer import run
from celery_gaffer.store.migrate import head_revision, shipped_revisions

from . import project


def ids(messages: list[Any]) -> list[str]:
    return [message.id for message in messages]


def test_the_command_migrates_an_empty_database_and_status_says_there_is_nothing(
    empty_sqlite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["migrate"]) == 0
    assert empty_sqlite.exists()
    assert head_revision() in capsys.readouterr().out
    assert run(["status"]) == 0


def test_status_exits_one_on_an_alert_and_two_on_an_error(
    gaffer_alias: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from celery_gaffer import ScheduleStore, every

    store = ScheduleStore(celery_app())
    store.add("poll", "t.report", every(60))
    store.pause("poll", note="holiday")
    assert run(["status"]) == 0
    store.resume("poll")
    with pytest.raises(SystemExit) as exited:
        run(["pause", "nope"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert "nope" in err
    assert len(err.strip().splitlines()) == 1


def test_an_unmigrated_gaffer_database_warns_w001_only_with_its_database(
    empty_sqlite: Path,
) -> None:
    assert ids(check_tables(databases=None)) == []
    assert ids(check_tables(databases=["default"])) == []
    messages = check_tables(databases=["empty"])
    assert ids(messages) == ["gaffer.W001"]
    assert "python manage.py gaffer migrate" in messages[0].msg
    assert not empty_sqlite.exists()  # the check created no file


def test_with_the_setting_djangos_migrate_makes_the_gaffer_tables_too(
    empty_sqlite: Path,
) -> None:
    """GAFFER_MIGRATE_WITH_DJANGO: Django's migrate (and so its test runner's) migrates
    the Gaffer tables of the Gaffer alias, and only of that alias."""
    from django.core.management import call_command
    from django.test import override_settings

    with override_settings(GAFFER_MIGRATE_WITH_DJANGO=True):
        call_command("migrate", database="lite", verbosity=0)
        assert ids(check_tables(databases=["empty"])) == ["gaffer.W001"]
        call_command("migrate", database="empty", verbosity=0)
    assert ids(check_tables(databases=["empty"])) == []


def test_tables_behind_warn_w002_naming_both_revisions(empty_sqlite: Path) -> None:
    head = head_revision()
    older = shipped_revisions()[head]
    assert older is not None
    assert run(["migrate", "--to", older]) == 0
    messages = check_tables(databases=["empty"])
    assert ids(messages) == ["gaffer.W002"]
    assert f"revision {older}, this release needs {head}" in messages[0].msg
    assert run(["migrate"]) == 0
    assert check_tables(databases=["empty"]) == []


def test_migrated_tables_and_a_django_url_pass_every_check(gaffer_alias: str) -> None:
    assert check_configuration() == []
    assert check_tables(databases=[gaffer_alias]) == []


def test_a_url_that_does_not_parse_is_e001_naming_the_key(django_project: Any) -> None:
    app = project.use_alias("nowhere")
    try:
        messages = check_configuration()
        assert ids(messages) == ["gaffer.E001"]
        assert "gaffer_database_url" in messages[0].msg
        assert "nowhere" in messages[0].msg
    finally:
        project.use_alias("default")
    assert app.conf.gaffer_database_url == "django://default"


def test_a_url_outside_django_warns_that_the_admin_cannot_read_it(django_project: Any) -> None:
    from celery_gaffer.settings import forget_settings

    app = celery_app()
    app.conf.gaffer_database_url = django_project["sqlite"]
    forget_settings(app)
    try:
        messages = check_configuration()
        assert ids(messages) == ["gaffer.W003"]
        assert 'CELERY_GAFFER_DATABASE_URL = "django://default"' in messages[0].hint
    finally:
        project.use_alias("default")


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("tests.integration.django.nothing:app", "cannot import"),
        ("tests.integration.django.celery_app:missing", "is nothing, not a Celery app"),
        ("tests.integration.django.project.CELERY_APP", "is str, not a Celery app"),
        ("app", "names no attribute"),
    ],
)
def test_a_wrong_celery_app_path_is_e002_naming_the_setting(
    django_project: Any, path: str, reason: str
) -> None:
    from django.test import override_settings

    with override_settings(GAFFER_CELERY_APP=path):
        messages = check_configuration()
    assert ids(messages) == ["gaffer.E002"]
    assert messages[0].msg.startswith("GAFFER_CELERY_APP: ")
    assert reason in messages[0].msg


def test_without_the_setting_a_current_app_that_does_not_read_djangos_settings_is_e002(
    django_project: Any,
) -> None:
    """Celery's fallback app (the project's __init__.py never imported its own) would
    otherwise make its own gaffer.sqlite3 and migrate that."""
    from django.conf import settings
    from django.test import override_settings

    with override_settings(CELERY_GAFFER_DATABASE_URL="django://default"):
        del settings.GAFFER_CELERY_APP
        messages = check_configuration()
    assert ids(messages) == ["gaffer.E002"]
    assert "does not read the Django settings" in messages[0].msg


def test_manage_py_gaffer_runs_in_its_own_process_with_the_exit_codes(
    django_project: Any, tmp_path: Path
) -> None:
    """The real ``manage.py`` path: Django's ManagementUtility, then click."""
    from django.conf import settings

    settings_file = tmp_path / "gaffer_test_settings.py"
    settings_file.write_text(
        "from tests.integration.django.project import settings\n"
        "from sqlalchemy.engine import make_url\n"
        "from pathlib import Path\n"
        f"globals().update(settings(make_url({django_project['postgresql']!r}), "
        f"Path({str(django_project['folder'])!r})))\n"
    )
    root = Path(__file__).resolve().parents[3]
    env = {"PYTHONPATH": f"{root}:{tmp_path}", "DJANGO_SETTINGS_MODULE": "gaffer_test_settings"}
    manage = [sys.executable, "-m", "django"]
    done = subprocess.run([*manage, "gaffer", "migrate"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert head_revision() in done.stdout
    failed = subprocess.run(
        [*manage, "gaffer", "resume", "no-such"], env=env, capture_output=True, text=True
    )
    assert failed.returncode == 2
    assert failed.stderr.startswith("error: ")
    assert len(failed.stderr.splitlines()) == 1
    helped = subprocess.run([*manage, "gaffer", "--help"], env=env, capture_output=True, text=True)
    assert helped.returncode == 0
    assert "migrate" in helped.stdout
    checked = subprocess.run(
        [*manage, "check", "--database", "default"], env=env, capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stderr
    assert "gaffer." not in checked.stdout + checked.stderr
    assert settings.DATABASES["default"]["NAME"] in django_project["postgresql"]


def test_empty_gaffer_tables_leaves_every_gaffer_table_empty(gaffer_alias: str) -> None:
    from celery_gaffer import ScheduleStore, every
    from celery_gaffer.contrib.django.testing import empty_gaffer_tables

    from .celery_app import app

    store = ScheduleStore(app, check_tasks=False)
    store.add("tested", "t.anything", every(60))
    assert [stored.name for stored in store.list()] == ["tested"]
    empty_gaffer_tables()
    assert store.list() == []
    assert store.audit("tested") == []
