"""kombu's filesystem transport, for the embedded default (no broker server to run).

As in ``example_project/billing/broker.py``: each message is written under a name no
queue reads, then renamed to its queue name (atomic on one filesystem), so a worker never
takes a half-written file (celery/kombu#1551). And the folders are created on first use.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):  # type: ignore[misc]
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for folder in (self.data_folder_in, self.data_folder_out, self.processed_folder):
            Path(folder).mkdir(parents=True, exist_ok=True)
        Path(self.control_folder).mkdir(parents=True, exist_ok=True)

    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:
        """Put ``payload`` onto ``queue``: written whole, then renamed into place."""
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        writing = os.path.join(self.data_folder_out, f".{uuid.uuid4()}.writing")
        try:
            with open(writing, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(writing, final)
        except OSError as exc:
            if os.path.exists(writing):
                os.remove(writing)
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):  # type: ignore[misc]
    Channel = Channel
