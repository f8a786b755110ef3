# Forest — the two commands: `make run` and `make test`. See README.md.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
TEST_STAMP := $(VENV)/.test-installed-stamp
WHEELHOUSE := $(VENV)/wheelhouse

# Embedded defaults for `make run`: DEBUG on, SQLite and a filesystem broker under var/ unless the
# caller exports DATABASE_URL / CELERY_BROKER_URL (then PostgreSQL / Redis are used).
RUN_ENV := DEBUG=$${DEBUG:-1}
# Native ingress on one machine: the local agent's mesh proxy is on loopback, public names under forest.localhost.
RUN_ENV += FOREST_MESH_NETWORKS=$${FOREST_MESH_NETWORKS:-127.0.0.0/8} \
	FOREST_INGRESS_DOMAINS=$${FOREST_INGRESS_DOMAINS:-forest.localhost}

# `make test` always uses real PostgreSQL and Redis on 127.0.0.1 (started by scripts/services-up.sh).
TEST_ENV := DATABASE_URL=$${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/forest} \
	CELERY_BROKER_URL=$${TEST_CELERY_BROKER_URL:-redis://127.0.0.1:6379/15} \
	SECRET_KEY=forest-test-secret-key-not-for-production DEBUG=0 SECURE_SSL_REDIRECT=0 \
	ALLOWED_HOSTS=testserver,127.0.0.1,localhost FLAGS_CACHE_TTL_S=0 PLACEMENT_FLEET_REFRESH_S=0

PYTEST_ARGS ?= -n 2

.PHONY: run test fuzz mutation lint venv clean help

help:  ## Show the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

# `make run` installs what running needs; `make test` adds the test and benchmark extras (pytest, browsers'
# driver, S3 and Kubernetes fakes, fuzzers, linters, Helm) on top.
$(STAMP): pyproject.toml $(wildcard agent/pyproject.toml)
	@test -x $(BIN)/python || { echo "==> creating $(VENV) with $(PYTHON)"; $(PYTHON) -m venv $(VENV); }
	@echo "==> installing Host and the agent (runtime only; the first time takes a few minutes)"
	$(BIN)/python -m pip install --upgrade pip --progress-bar on
	$(BIN)/python -m pip install --progress-bar on -e . $(if $(wildcard agent/pyproject.toml),-e ./agent)
	@touch $(STAMP)

$(TEST_STAMP): $(STAMP) pyproject.toml $(wildcard agent/pyproject.toml) docker/controller-requirements.txt
	@echo "==> installing the test and benchmark extras"
	$(BIN)/python -m pip install --progress-bar on -e '.[dev]' $(if $(wildcard agent/pyproject.toml),-e './agent[kubernetes]')
	@# The controller image's pinned build tools, so tests/deploy/test_images.py can replay its install offline.
	$(BIN)/python -m pip download --quiet --no-deps --dest $(WHEELHOUSE) \
		$$(grep -E '^(setuptools|wheel)==' docker/controller-requirements.txt)
	@touch $(TEST_STAMP)

venv: $(TEST_STAMP)  ## Create .venv and install Host, the agent and the dev tools

run: $(STAMP)  ## Local settings, migrate, load the demo and serve Host (web :8000 + worker + beat); Ctrl-C stops all
	@mkdir -p var/broker/queue var/broker/processed var/broker/control
	@echo "==> local settings (var/forest.env) and the database"
	$(RUN_ENV) $(BIN)/python -m apps.core.localenv
	@echo "==> migrating"
	$(RUN_ENV) $(BIN)/python manage.py migrate --noinput
	$(RUN_ENV) $(BIN)/python manage.py load_demo
	@echo "Forest Host on http://127.0.0.1:8000/  (admin: /admin/, API schema: /api/schema/)"
	$(RUN_ENV) $(BIN)/honcho start -f Procfile

test: $(TEST_STAMP)  ## Architecture contracts, types, the image linter, then the whole suite against real PostgreSQL and Redis
	$(BIN)/lint-imports
	$(BIN)/python scripts/typecheck.py
	$(BIN)/hadolint docker/host.Dockerfile docker/controller.Dockerfile
	@scripts/services-up.sh
	$(TEST_ENV) $(BIN)/python -m pytest $(PYTEST_ARGS)

fuzz: $(TEST_STAMP)  ## The API fuzz and hostile corpus with many more examples (FOREST_FUZZ_EXAMPLES, default 150)
	@scripts/services-up.sh
	$(TEST_ENV) FOREST_FUZZ_EXAMPLES=$${FOREST_FUZZ_EXAMPLES:-150} $(BIN)/python -m pytest -q \
		tests/core/test_schemathesis_api.py tests/core/test_hostile.py tests/groves/test_schemathesis.py

mutation: $(TEST_STAMP)  ## Break each curated rule (scripts/mutation_check.py) and check its tests notice; prints the score
	@scripts/services-up.sh
	$(TEST_ENV) $(BIN)/python scripts/mutation_check.py $(MUTANTS)

lint: $(TEST_STAMP)  ## ruff, the import-linter contracts and mypy (strict modules clean, the rest under mypy-baseline.json)
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/python scripts/typecheck.py

clean:  ## Remove the venv and local state
	rm -rf $(VENV) var staticfiles
