"""The example project's own tests (example_project/billing/tests), which rehearse its
Beat schedules with the ``gaffer_beat`` fixture of the pytest plugin, run as a user runs
them: ``python -m pytest billing/tests`` in a copy of the project, outside this repository
(so that no conftest or pytest setting of celery-gaffer's own suite applies)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.acceptance


def test_the_billing_projects_tests_pass_with_the_plugin_from_its_entry_point(
    tmp_path: Path,
) -> None:
    project = tmp_path / "example_project"
    shutil.copytree(ROOT / "example_project", project, ignore=shutil.ignore_patterns("var"))
    env = {key: value for key, value in os.environ.items() if not key.startswith("BILLING_")}
    # Services the tests must not need: the app's own defaults point at nothing.
    env["BILLING_VAR"] = str(tmp_path / "var")
    env["CELERY_BROKER_URL"] = "redis://127.0.0.1:1/0"
    env["GAFFER_DATABASE_URL"] = "postgresql+psycopg://nobody@127.0.0.1:1/none"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "billing/tests"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "3 passed" in out, out
    assert "test_the_nightly_reconciliation_runs_once_when_0130_does_not_exist PASSED" in out
    assert not (tmp_path / "var").exists(), "the tests wrote outside their own database"
