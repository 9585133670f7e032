"""The lowest-pins file for the Python that runs this script.

``python constraints/lowest.py`` prints its path: ``lowest-py<major><minor>.txt`` when this
directory has one for that Python (a floor of pyproject.toml with no wheel for it, raised
to the first release that has one), else ``lowest.txt`` (pyproject.toml's floors).
``python constraints/lowest.py --pip-install ARGS...`` runs ``pip install -c <that file>
ARGS...`` on the same Python: ``make test-lowest``, ``tox -e lowest`` and ``.ci/pythons``
install through it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def lowest_pins() -> Path:
    """The constraints file for the running Python."""
    here = Path(__file__).resolve().parent
    own = here / f"lowest-py{sys.version_info[0]}{sys.version_info[1]}.txt"
    return own if own.is_file() else here / "lowest.txt"


def main(argv: list[str]) -> None:
    if not argv:
        print(lowest_pins())
        return
    if argv[0] != "--pip-install":
        print(f"usage: {sys.argv[0]} [--pip-install PIP_INSTALL_ARGS...]", file=sys.stderr)
        sys.exit(2)
    command = [sys.executable, "-I", "-m", "pip", "install", "-c", str(lowest_pins()), *argv[1:]]
    os.execv(sys.executable, command)


if __name__ == "__main__":
    main(sys.argv[1:])
