"""Every Python block of the tutorial runs, in order, in a fresh folder."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def test_the_tutorial_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = BLOCK.findall((ROOT / "docs" / "tutorial.md").read_text())
    assert len(blocks) >= 5
    monkeypatch.chdir(tmp_path)
    # A real module, so that SQLAlchemy can resolve the annotations of its models.
    module = types.ModuleType("tutorial")
    monkeypatch.setitem(sys.modules, "tutorial", module)
    for number, block in enumerate(blocks, 1):
        try:
            exec(compile(block, f"tutorial.md block {number}", "exec"), module.__dict__)
        except Exception as exc:  # pragma: no cover - reported with the block's number
            raise AssertionError(f"tutorial block {number} failed: {exc!r}\n{block}") from exc


API_HEADINGS = {
    "package": "## `celery_gaffer`",
    "task": "## `GafferTask` members",
    "store": "## `ScheduleStore(app)` methods",
    "signals": "## Signals: `celery_gaffer.signals`",
    "exceptions": "## Exceptions: `celery_gaffer.exceptions`",
}


def _api_tables() -> dict[str, list[str]]:
    """The names in the first column of each table of docs/reference/api.md, by heading:
    ``store.add(name, ...)`` and ``self.session()`` give ``add`` and ``session``."""
    text = (ROOT / "docs" / "reference" / "api.md").read_text()
    tables: dict[str, list[str]] = {}
    heading = ""
    for line in text.split("## Generated reference")[0].splitlines():
        if line.startswith("## "):
            heading = line.strip()
            tables[heading] = []
        elif line.startswith("| `"):
            first_cell = line.split("|")[1]
            span = re.search(r"`([^`]+)`", first_cell)
            assert span, line
            tables[heading].append(span.group(1).split("(")[0].split(".")[-1])
    return tables


def _public_members(cls: type, *, own_of: tuple[type, ...] = ()) -> set[str]:
    classes = own_of or (cls,)
    return {name for c in classes for name in vars(c) if not name.startswith("_")}


def test_the_api_reference_lists_every_public_name_and_no_other() -> None:
    import celery_gaffer
    from celery_gaffer import GafferTask, ScheduleStore, exceptions, signals
    from celery_gaffer.runs.delivery import DeliveryPolicy

    tables = _api_tables()
    expected = {
        "package": set(celery_gaffer.__all__),
        "task": _public_members(GafferTask, own_of=(GafferTask, DeliveryPolicy)),
        "store": _public_members(ScheduleStore),
        "signals": set(signals.__all__),
        "exceptions": {
            name
            for name, obj in vars(exceptions).items()
            if isinstance(obj, type) and issubclass(obj, exceptions.GafferError)
        },
    }
    for part, names in expected.items():
        heading = API_HEADINGS[part]
        assert heading in tables, f"docs/reference/api.md has no {heading!r} table"
        listed = tables[heading]
        assert len(listed) == len(set(listed)), f"{heading}: a name is listed twice: {listed}"
        missing, stale = names - set(listed), set(listed) - names
        assert not missing, f"{heading}: add a line for each of {sorted(missing)}"
        assert not stale, f"{heading}: {sorted(stale)} no longer exist"
