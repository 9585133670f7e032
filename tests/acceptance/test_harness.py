"""The test harness itself: under CI a missing service fails the run, naming it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEAD_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:1/test"
DEAD_REDIS = "redis://127.0.0.1:1/0"

_PROBE_TESTS = """
def test_needs_postgres(postgres_url):
    assert postgres_url

def test_needs_redis(redis_url):
    assert redis_url
"""


def _pytest(tmp_path: Path, ci: bool) -> subprocess.CompletedProcess[str]:
    probe = ROOT / "tests" / "integration" / f"test_zz_probe_{os.getpid()}.py"
    probe.write_text(_PROBE_TESTS)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"CI", "PYTEST_ADDOPTS", "PYTEST_CURRENT_TEST"}
    }
    env.update(GAFFER_TEST_POSTGRES_URL=DEAD_POSTGRES, GAFFER_TEST_REDIS_URL=DEAD_REDIS)
    if ci:
        env["CI"] = "true"
    try:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", str(probe)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        probe.unlink()


@pytest.mark.parametrize("ci", [True, False], ids=["CI", "local"])
def test_missing_services_fail_under_ci_and_skip_elsewhere(tmp_path: Path, ci: bool) -> None:
    result = _pytest(tmp_path, ci)
    output = result.stdout + result.stderr
    assert "PostgreSQL is unreachable at postgresql+psycopg://postgres@127.0.0.1:1/test" in output
    assert "Redis is unreachable at redis://127.0.0.1:1/0" in output
    if ci:
        assert result.returncode == 1, output
        assert "2 errors" in output or "2 error" in output
    else:
        assert result.returncode == 0, output
        assert "2 skipped" in output
        skip_lines = [line for line in output.splitlines() if line.startswith("SKIPPED")]
        assert len(skip_lines) == 2
