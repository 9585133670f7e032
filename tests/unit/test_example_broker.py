"""The example project's filesystem broker: a message is whole before a consumer can take
it (kombu's own transport creates the file first and writes it after, celery/kombu#1551)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from queue import Empty
from typing import Any

import pytest
from kombu import Connection

EXAMPLE = Path(__file__).resolve().parents[2] / "example_project"


@pytest.fixture
def broker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.syspath_prepend(str(EXAMPLE))
    sys.modules.pop("billing.broker", None)
    options = {
        "data_folder_in": str(tmp_path / "queue"),
        "data_folder_out": str(tmp_path / "queue"),
        "control_folder": str(tmp_path / "control"),
        "store_processed": False,
    }
    for folder in ("queue", "control"):
        (tmp_path / folder).mkdir()
    with Connection(
        "filesystem://", transport="billing.broker:Transport", transport_options=options
    ) as conn:
        yield conn.default_channel


def test_a_message_is_invisible_until_written_whole(
    broker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import billing.broker

    seen: list[str] = []
    replace = os.replace

    def renamed(src: str, dst: str) -> None:
        # Written, not yet renamed: a consumer finds nothing to take.
        with pytest.raises(Empty):
            broker._get("q")
        seen.append(Path(src).read_text())
        replace(src, dst)

    monkeypatch.setattr(billing.broker.os, "replace", renamed)
    broker._put("q", {"body": "hello"})
    assert len(seen) == 1
    assert '"hello"' in seen[0]
    assert broker._get("q") == {"body": "hello"}
    assert os.listdir(broker.data_folder_in) == []


def test_a_failed_write_leaves_nothing_behind(broker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import billing.broker
    from kombu.exceptions import ChannelError

    def refused(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(billing.broker.os, "replace", refused)
    with pytest.raises(ChannelError):
        broker._put("q", {"body": "hello"})
    assert os.listdir(broker.data_folder_in) == []
