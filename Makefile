# acpfsm: two commands on a fresh machine, `make demo` and `make test`.
# Both create .venv and install the pinned dependencies (constraints.txt) themselves.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.acpfsm-installed
SOURCES := $(shell find statecharts runtime adapters -name '*.py' -o -name 'py.typed' 2>/dev/null)

.PHONY: all install test lint typecheck diagrams diagrams-check verify chromium postgresql nats-server pytest \
	demo bench soak mutate-charts mutate docs clean

all: test

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Strict editable install (a link tree, so mypy sees acpfsm.*); re-run when a source file is
# added or changed so the link tree stays complete.
$(STAMP): $(BIN)/python pyproject.toml constraints.txt $(SOURCES)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt \
		-e '.[test,docs]' --config-settings editable_mode=strict
	@touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy -p acpfsm.statecharts -p acpfsm.runtime -p acpfsm.adapters -p acpfsm.testing -p acpfsm.tools

# The chart declarations the runtime runs from (statecharts/_generated.py: no
# python-statemachine at import), then the diagrams; both drift-checked by diagrams-check.
diagrams: $(STAMP)
	$(BIN)/acpfsm chart-tables --out statecharts/_generated.py
	$(BIN)/acpfsm diagrams --out diagrams --names statecharts/names.py

# Byte drift of every generated file, then every drawing measured in headless Chromium
# (overlapping labels, text outside its box, edges through boxes) and the screenshots.
diagrams-check: $(STAMP) chromium
	$(BIN)/acpfsm chart-tables --check --out statecharts/_generated.py
	$(BIN)/acpfsm diagrams --check --browser --out diagrams --names statecharts/names.py

# Every interleaving of one execution's life at the default bounds (3 generations, both
# carriers): exit 1 with a shortest counterexample for each property that fails.
verify: $(STAMP)
	$(BIN)/acpfsm verify

# The documentation site (mkdocs, docs/ and mkdocs.yml) into build/site; --strict: a warning,
# a broken link or a reference mkdocstrings cannot resolve fails the build. The code blocks
# of README.md and docs/ run in pytest (tests/test_docs_examples.py).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir build/site

# Headless Chromium for the legibility check and the browser tests: Debian's package,
# installed only where
# it is missing and we are root (CI on a clean clone); elsewhere the script says what to do.
# A failed install does not stop make: that test then fails with the reason (it never skips).
chromium:
	-.ci/install-chromium

# PostgreSQL's server programs for the PostgresStore tests (each test run starts a throwaway
# cluster of its own): Debian's package, installed the same way.
postgresql:
	-.ci/install-postgresql

# NATS with JetStream for the event bus and `acpfsm serve` tests (each test starts a
# throwaway server of its own on a free loopback port): Debian's nats-server, installed the
# same way.
nats-server:
	-.ci/install-nats-server

# The scenario suites again with every chart on python-statemachine's own engine (the chart
# tests run both engines side by side in the first run).
REFERENCE_SUITES := tests/runtime/test_scenarios_s1_init.py tests/runtime/test_scenarios_s2_s3_model.py \
	tests/runtime/test_scenarios_s4_prompt.py tests/runtime/test_scenarios_s4_steer_cancel.py \
	tests/runtime/test_scenarios_s5_facade.py tests/runtime/test_anomalies.py

# The tests run on PYTEST_WORKERS processes (pytest-xdist; the transition coverage joins the
# workers' records); PYTEST_WORKERS=0 runs them in this process.
PYTEST_WORKERS ?= 2

pytest: $(STAMP)
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist worksteal \
		--acpfsm-transition-coverage=100 --acpfsm-check-traces
	ACPFSM_ENGINE=reference $(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist worksteal \
		-p no:acpfsm_coverage --acpfsm-check-traces $(REFERENCE_SUITES)

test: lint typecheck diagrams-check verify docs chromium postgresql nats-server pytest

demo: $(STAMP)
	$(BIN)/acpfsm demo

bench: $(STAMP)
	$(BIN)/python -m acpfsm.tools.bench

# Many executions under random faults, everything counted (at most ten minutes): trio at
# 200 x 20 (50 at a time), then asyncio at 50 x 10. Fails when anything was lost,
# duplicated, crossed, left over or illegal.
soak: $(STAMP)
	$(BIN)/python -m acpfsm.tools.soak --backend trio --executions 200 --prompts 20 --concurrency 50
	$(BIN)/python -m acpfsm.tools.soak --backend asyncio --executions 50 --prompts 10 --concurrency 50

# Chart mutation testing (not in `make test`: slow): every declared transition deleted,
# retargeted, unguarded, negated and swapped in the compiled tables; the behavioural tests
# that fire its event must notice. Incremental (.cache/mutate-charts); pass ARGS, e.g.
# ARGS='--chart execution --jobs 2' or ARGS='--shard 1/4'.
mutate-charts: $(STAMP)
	nice $(BIN)/python -m acpfsm.tools.mutate_charts $(ARGS)

# Mutation testing of the decision code with cosmic-ray (not in `make test`: hours for all of
# it). Incremental (.cache/mutate); ARGS='--target classify', '--shard 1/2', '--limit 50'.
MUTATION_STAMP := $(VENV)/.acpfsm-mutation
$(MUTATION_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt \
		-e '.[test,mutation]' --config-settings editable_mode=strict
	@touch $(MUTATION_STAMP)

mutate: $(MUTATION_STAMP)
	nice $(BIN)/python -m tests.mutation.mutate $(ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .pytest_cache .ruff_cache
