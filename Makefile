# Everything needs only Python 3.10+ and make: each target creates .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The lowest supported versions of the dependencies get a venv of their own: constraints/lowest.py
# picks the pins for the Python that builds it (lowest.txt, or lowest-py<XY>.txt where a floor
# has no wheel for that Python).
LOWEST_VENV ?= .venv-lowest
LOWEST_BIN := $(LOWEST_VENV)/bin
LOWEST_STAMP := $(LOWEST_VENV)/.installed
# The demo gets a venv of its own with the package and its console (the web extra): no test,
# lint or docs extras.
DEMO_VENV ?= .venv-demo
DEMO_STAMP := $(DEMO_VENV)/.installed

.PHONY: install test test-fast test-lowest test-pythons lint format typecheck check clean demo docs chaos chaos-short bench-web bench-status

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --upgrade --upgrade-strategy eager -e '.[web,test,lint,docs]'
	touch $(STAMP)

# Built from scratch whenever the pins change: upgrading in place would leave behind
# packages that the new pins no longer bring.
$(LOWEST_STAMP): pyproject.toml $(wildcard constraints/lowest*)
	rm -rf $(LOWEST_VENV)
	$(PYTHON) -m venv $(LOWEST_VENV)
	$(LOWEST_BIN)/python -m pip install --quiet --upgrade pip
	$(LOWEST_BIN)/python constraints/lowest.py --pip-install --quiet -e '.[web,test]'
	touch $(LOWEST_STAMP)

$(DEMO_STAMP): pyproject.toml Makefile
	test -x $(DEMO_VENV)/bin/python || $(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(DEMO_VENV)/bin/python -m pip install --quiet -e '.[web]'
	touch $(DEMO_STAMP)

install: $(STAMP)

## Run the whole suite: unit, DST property tests, integration (PostgreSQL, Redis), acceptance.
test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

## Only the tests that need no service.
test-fast: $(STAMP)
	$(BIN)/python -m pytest tests/unit tests/dst $(PYTEST_ARGS)

## Unit and integration tests on the lowest supported dependency versions (constraints/, for $(PYTHON)).
test-lowest: $(LOWEST_STAMP)
	$(LOWEST_BIN)/python -m pytest tests/unit tests/integration $(PYTEST_ARGS)

## Unit and integration tests on the oldest and the newest supported Python, side by side:
## 3.10 on the lowest pins, 3.13 on the newest releases (.ci/pythons; venvs .venv-py310, .venv-py313).
test-pythons:
	bash .ci/pythons $(PYTHONS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: $(STAMP)
	$(BIN)/mypy
	$(BIN)/mypy --strict tests/typing

check: lint typecheck test

clean:
	rm -rf $(VENV) $(LOWEST_VENV) $(DEMO_VENV) .venv-py3* build *.egg-info .mypy_cache .ruff_cache

## The example project on the embedded default (SQLite + filesystem broker): no servers.
demo: $(DEMO_STAMP)
	cd example_project && ../$(DEMO_VENV)/bin/python demo.py

## The documentation, built the way CI builds it (warnings are errors).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir build/site

## The chaos suite's short form (3 minutes of faults) and its checker's self-test. The faults
## restart this machine's PostgreSQL and Redis: refused unless GAFFER_CHAOS_RESTART_SERVICES=1.
chaos-short: $(STAMP)
	$(BIN)/python -m pytest tests/chaos -m chaos -s $(PYTEST_ARGS)

## The chaos suite's long form: 30 minutes of faults on this machine's PostgreSQL and Redis
## (refused unless GAFFER_CHAOS_RESTART_SERVICES=1, as chaos-short).
chaos: $(STAMP)
	$(BIN)/python -m tests.chaos.run --seconds $${CHAOS_SECONDS:-1800} $${CHAOS_SEED:+--seed $$CHAOS_SEED}

## The web console at 100,000 schedules (PostgreSQL): its first pages against the plain SQL of the same page.
bench-web: $(STAMP)
	$(BIN)/python benchmarks/web.py

## `gaffer status` at 100,000 and 1,000,000 schedules (PostgreSQL) against a plain SELECT of the same rows.
bench-status: $(STAMP)
	$(BIN)/python benchmarks/status.py
