"""Fail unless the main venv holds the newest releases CI must test on.

`make install` upgrades every dependency to the newest release pyproject.toml's ranges
admit; this names the lines the main run must be on, so that a range that silently
holds a dependency back (a cap, a resolver choice) fails CI instead of going untested.
"""

from __future__ import annotations

import sys
from importlib.metadata import version

#: distribution -> the release line the main run must be on (a prefix of its version).
NEWEST = {"SQLAlchemy": "2.1.", "psycopg": "3.3.", "celery": "5.7.", "kombu": "5.7."}

wrong = [
    f"{name} {version(name)} (expected {line}x)"
    for name, line in NEWEST.items()
    if not version(name).startswith(line)
]
if wrong:
    print("CI: not the newest releases: " + ", ".join(wrong), file=sys.stderr)
    sys.exit(2)
print("CI: newest run on " + ", ".join(f"{name} {version(name)}" for name in NEWEST))
