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
