"""Every command checks the database's revision against the shipped head without
importing Alembic: what it reads from the migrations' headers is Alembic's own history."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from alembic.config import Config
from alembic.script import ScriptDirectory

from celery_gaffer.store.migrate import (
    MIGRATIONS_DIR,
    _is_older,
    head_revision,
    known_revisions,
    shipped_revisions,
)

ROOT = Path(__file__).resolve().parents[3]


def alembic_history() -> ScriptDirectory:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return ScriptDirectory.from_config(config)


def test_the_headers_give_alembic_s_history_head_and_order() -> None:
    history = alembic_history()
    assert shipped_revisions() == {
        script.revision: script.down_revision for script in history.walk_revisions()
    }
    assert head_revision() == history.get_current_head()
    assert known_revisions() == {script.revision for script in history.walk_revisions()}
    for than in known_revisions():
        below = {script.revision for script in history.iterate_revisions(than, "base")}
        for target in known_revisions():
            assert _is_older(target, than) == (target in below and target != than)


def test_checking_the_revision_imports_no_alembic() -> None:
    probe = (
        "import json, sys\n"
        "from celery_gaffer.store.migrate import head_revision, known_revisions\n"
        "head_revision(); known_revisions()\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    modules = json.loads(out.strip().splitlines()[-1])
    assert not [name for name in modules if name.split(".")[0] in ("alembic", "mako")]
