"""kombu's filesystem transport, with each message whole before a worker can see it.

kombu's filesystem transport creates a message's file in the queue folder and then
writes it: a worker that lists the folder in between takes an empty file, cannot decode
it, and stops with "Unrecoverable error: JSONDecodeError" (celery/kombu#1551; the demo's
Beats publish while its worker consumes). Here a message is written under a name no
queue reads, then renamed to its queue name, which is atomic on one filesystem.
Selected with ``broker_transport = "billing.broker:Transport"`` (see ``celery_app``).
"""

from __future__ import annotations

import os
import uuid
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):  # type: ignore[misc]
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:
        """Put ``payload`` onto ``queue``: written whole, then renamed into place."""
        # The name kombu gives a message: consumers take them in the order it sorts in.
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        # ".<uuid>.writing": no queue's messages end in that, so no consumer takes it.
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
