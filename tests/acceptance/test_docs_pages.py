"""Every code block of the how-to guides and the operations pages runs, in page order.

Each page runs in a fresh folder (:mod:`tests.docs_runner`): Python blocks in one
namespace, titled blocks saved as files, console blocks as real commands (``celery``
subprocesses) whose shown output must match, a console a page starts as a real
process. A block that cannot run says why in the
page (``<!-- skip: next "reason" -->``); ``tests/unit/test_docs.py`` checks that every
block either runs here, in ``test_tutorial.py``, or says why not.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from celery_gaffer.store import dispose_engines

from ..docs_processes import Background
from ..docs_runner import page_id, page_paths, run_page

pytestmark = [
    pytest.mark.acceptance,
    # Several pages define a module `proj` with tasks of the same names, and Celery keeps
    # the tasks of `@app.task` in a registry shared by every app of the process.
    pytest.mark.filterwarnings("ignore:Task name .* is already registered"),
]

#: Run with real worker and Beat processes by test_tutorial.py.
WITH_PROCESSES = ("index.md", "tutorial.md")
PAGES = [path for path in page_paths() if page_id(path) not in WITH_PROCESSES]


@pytest.mark.parametrize("path", PAGES, ids=page_id)
def test_the_page_runs_as_written(path: Path, tmp_path: Path) -> None:
    try:
        page = run_page(path, tmp_path, services=Background())
    finally:
        # The page's relative SQLite URLs must not reach the next page's folder through
        # a pooled connection.
        dispose_engines()
    assert page.ran or page.skipped, f"{page_id(path)} has no code block"
