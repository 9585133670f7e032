"""GafferTask.atomic(): fenced, keyed Django transactions on real PostgreSQL and SQLite."""
