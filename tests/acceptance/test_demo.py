"""`make demo`'s script: the example project on the embedded default, run twice."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.acceptance


def test_the_demo_runs_twice_without_any_server(tmp_path: Path) -> None:
    project = tmp_path / "example_project"
    shutil.copytree(ROOT / "example_project", project, ignore=shutil.ignore_patterns("var"))
    # Services the demo must not need: point every default elsewhere, to nothing.
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DEMO_SECONDS": "65",
        "CELERY_BROKER_URL": "redis://127.0.0.1:1/0",
        "GAFFER_DATABASE_URL": "postgresql+psycopg://nobody@127.0.0.1:1/none",
    }
    for _attempt in range(2):
        result = subprocess.run(
            [sys.executable, "demo.py"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=400,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        runs = result.stdout.split("gaffer runs", 1)[1]
        succeeded = {
            line.split()[0] for line in runs.splitlines() if re.search(r"\bsucceeded\b", line)
        }
        assert len(succeeded) >= 3, result.stdout
        assert "error" not in result.stdout.split("gaffer status", 1)[1].split("gaffer runs")[0]
    leftovers = subprocess.run(["pgrep", "-f", str(project)], capture_output=True, text=True)
    assert leftovers.stdout.strip() == ""
