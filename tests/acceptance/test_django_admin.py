"""The Gaffer admin in Debian's chromium (Playwright), served by a real ``manage.py
runserver`` of a small Django project (SQLite: Django's tables and the Gaffer tables in
one file, ``gaffer_database_url = "django://default"``): a superuser logs in, opens the
schedules, a schedule, the runs and the audit log, pauses a schedule with a note through
the action's form, and finds the pause in the audit log under their name."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from celery_gaffer import ScheduleStore, cron, every

from ..processes import ROOT
from .test_flower import free_port, wait_for
from .test_web import browser

pytestmark = pytest.mark.acceptance
__all__ = ["browser"]

SETTINGS = """
from pathlib import Path
HERE = Path(__file__).resolve().parent
SECRET_KEY = "acceptance-only"
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(HERE / "db.sqlite3")}}
INSTALLED_APPS = [
    "django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
    "django.contrib.sessions", "django.contrib.messages", "django.contrib.staticfiles",
    "celery_gaffer.contrib.django",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "djproj_urls"
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]
STATIC_URL = "static/"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
GAFFER_CELERY_APP = "djproj_celery:app"
CELERY_GAFFER_DATABASE_URL = "django://default"
"""
CELERY = """
from celery import Celery
app = Celery("djproj", broker="memory://")
app.config_from_object("django.conf:settings", namespace="CELERY")
"""
URLS = """
from django.contrib import admin
from django.urls import path
urlpatterns = [path("admin/", admin.site.urls)]
"""


def django(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "django", *args],
        cwd=folder,
        env=environment(folder),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"manage.py {' '.join(args)}: {done.stderr}"
    return done


def environment(folder: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": f"{folder}{os.pathsep}{ROOT}",
        "DJANGO_SETTINGS_MODULE": "djproj_settings",
        "DJANGO_SUPERUSER_PASSWORD": "correct horse",
    }


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[str, ScheduleStore]]:
    """The project migrated (Django's tables, then ``manage.py gaffer migrate``), a
    superuser ``ada``, two schedules, and ``runserver`` on a free port: its URL and a
    store of the same database."""
    (tmp_path / "djproj_settings.py").write_text(SETTINGS)
    (tmp_path / "djproj_celery.py").write_text(CELERY)
    (tmp_path / "djproj_urls.py").write_text(URLS)
    django(tmp_path, "migrate", "--verbosity", "0")
    django(tmp_path, "gaffer", "migrate")
    django(
        tmp_path, "createsuperuser", "--noinput", "--username", "ada", "--email", "ada@example.com"
    )
    checked = django(tmp_path, "check", "--database", "default")
    assert "gaffer." not in checked.stdout + checked.stderr
    app = Celery("acceptance-django", broker="memory://", set_as_current=False)
    app.conf.gaffer_database_url = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    store = ScheduleStore(app, check_tasks=False)
    store.add("nightly-report", "t.report", cron("30 2 * * *", "Europe/Berlin"))
    store.add("poll-bank", "t.poll", every(90))
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "django", "runserver", f"127.0.0.1:{port}", "--noreload"],
        cwd=tmp_path,
        env=environment(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(
            "runserver", lambda: urllib.request.urlopen(f"{url}/admin/login/", timeout=5).status
        )
        yield url, store
    finally:
        server.terminate()
        server.wait(timeout=30)
        app.close()


def test_a_superuser_pauses_a_schedule_with_a_note_in_the_admin(
    site: tuple[str, ScheduleStore], browser: Any
) -> None:
    url, store = site
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    try:
        page.goto(f"{url}/admin/login/")
        page.fill("input[name=username]", "ada")
        page.fill("input[name=password]", "correct horse")
        page.click("input[type=submit]")
        page.wait_for_load_state()
        page.goto(f"{url}/admin/gaffer/schedule/")
        rows = page.locator("#result_list tbody tr")
        assert rows.count() == 2
        assert "Europe/Berlin" in rows.first.inner_text()
        page.click("text=nightly-report")
        page.wait_for_load_state()
        assert "if resumed now" not in page.content()
        assert page.locator("#gaffer-next-fires li").count() == 5
        assert "add" in page.locator("#gaffer-history").inner_text()
        assert page.goto(f"{url}/admin/gaffer/jobrun/").status == 200
        page.goto(f"{url}/admin/gaffer/schedule/")
        page.check("#result_list tbody tr:has-text('poll-bank') input.action-select")
        page.select_option("select[name=action]", "pause")
        page.click("button[name=index]")
        page.wait_for_load_state()
        page.fill("textarea[name=note]", "the bank's API is down")
        page.fill("input[name=until]", "2h")
        page.click("input[type=submit][value=Pause]")
        page.wait_for_load_state()
        assert "Paused: poll-bank" in page.locator(".messagelist").inner_text()
        assert "paused until" in page.locator("#result_list").inner_text()
        page.goto(f"{url}/admin/gaffer/auditentry/")
        first = page.locator("#result_list tbody tr").first.inner_text()
        assert "ada" in first
        assert "admin" in first
        assert "the bank's API is down" in first
    finally:
        context.close()
    assert problems == []
    paused = store.get("poll-bank")
    assert not paused.enabled
    assert store.audit("poll-bank", limit=1)[0].actor == "ada"
