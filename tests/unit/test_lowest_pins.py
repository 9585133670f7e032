"""The lowest-pins files (constraints/) pin the floors pyproject.toml declares, per Python."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import requires
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

CONSTRAINTS = Path(__file__).resolve().parents[2] / "constraints"
#: The Pythons that have a lowest-pins file of their own; the others take lowest.txt.
OWN_FILES = {"3.12": "lowest-py312.txt", "3.13": "lowest-py313.txt"}
#: What pip installs under another name than the requirement's: psycopg[binary]'s wheel.
SAME_VERSION = {"psycopg-binary": "psycopg"}


def pins(name: str) -> dict[str, Version]:
    pinned = {}
    for line in (CONSTRAINTS / name).read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            requirement = Requirement(line)
            (spec,) = requirement.specifier
            assert spec.operator == "==", line
            pinned[canonicalize_name(requirement.name)] = Version(spec.version)
    return pinned


def floors(python: str) -> dict[str, Version]:
    """The lower bound of each dependency (and of the web, django, holidays and otel
    extras) on ``python``."""
    found = {}
    for line in requires("celery-gaffer") or []:
        requirement = Requirement(line)
        environment = {"python_version": python, "python_full_version": f"{python}.0"}
        chosen = [
            extra
            for extra in ("", "web", "django", "holidays", "otel")
            if requirement.marker is None
            or requirement.marker.evaluate({**environment, "extra": extra})
        ]
        if not chosen:
            continue
        (lower,) = [spec.version for spec in requirement.specifier if spec.operator == ">="]
        found[canonicalize_name(requirement.name)] = Version(lower)
    return found


@pytest.mark.parametrize("python", ["3.10", "3.11"])
def test_lowest_txt_pins_every_floor_exactly(python: str) -> None:
    pinned, lower = pins("lowest.txt"), floors(python)
    assert {name: pinned.get(name) for name in lower} == lower
    for name, same_as in SAME_VERSION.items():
        assert pinned[name] == pinned[same_as]
    assert set(pinned) == set(lower) | set(SAME_VERSION)


@pytest.mark.parametrize(("python", "name"), sorted(OWN_FILES.items()))
def test_a_python_of_its_own_raises_only_what_it_must(python: str, name: str) -> None:
    pinned, base, lower = pins(name), pins("lowest.txt"), floors(python)
    # The same distributions, none lower than lowest.txt or than the floor on that Python.
    assert set(pinned) == set(base)
    assert [n for n in pinned if pinned[n] < base[n] or pinned[n] < lower.get(n, base[n])] == []
    assert pinned != base
    for dist, same_as in SAME_VERSION.items():
        assert pinned[dist] == pinned[same_as]


def test_the_picker_names_the_running_pythons_file() -> None:
    picked = subprocess.run(
        [sys.executable, str(CONSTRAINTS / "lowest.py")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert Path(picked) == CONSTRAINTS / OWN_FILES.get(python, "lowest.txt")
