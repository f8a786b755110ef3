# Forest — the two commands: `make run` and `make test`. See README.md.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
WHEELHOUSE := $(VENV)/wheelhouse
# Every install comes from this one hash-checked lock (docs/decisions.md "Locked installs"); `make lock`
# rewrites it. uv compiles it and is fetched at lock time only, into a venv of its own.
LOCK := requirements.lock
UV_VERSION := 0.13.9
LOCK_TOOLS := $(VENV)/lock-tools
UV := $(LOCK_TOOLS)/bin/uv
UV_STAMP := $(LOCK_TOOLS)/.uv-$(UV_VERSION)

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

.PHONY: run test fuzz mutation lint venv lock upgrade clean help

help:  ## Show the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

# `make run` and `make test` install the same environment: exactly requirements.lock (Host, its dev extra, the
# agent with its kubernetes extra, and the build tools), every file checked against the lock's hashes; then
# Host and the agent themselves, editable, built with the locked setuptools (no build isolation: no
# unpinned download). The wheelhouse keeps the controller image's build tools so tests/deploy/test_images.py
# can replay its install offline.
$(STAMP): $(LOCK) pyproject.toml agent/pyproject.toml
	@test -x $(BIN)/python || { echo "==> creating $(VENV) with $(PYTHON)"; $(PYTHON) -m venv $(VENV); }
	@echo "==> installing $(LOCK) (hash-checked; the first time takes a few minutes)"
	$(BIN)/python -m pip install --progress-bar on --require-hashes --requirement $(LOCK)
	$(BIN)/python -m pip install --progress-bar on --no-deps --no-build-isolation -e . -e ./agent
	@# A pyproject.toml edited without `make lock` stops here, saying so, rather than as an ImportError later.
	$(BIN)/python scripts/image_requirements.py --check-lock
	$(BIN)/python scripts/image_requirements.py --build-tools > $(VENV)/build-tools.txt
	$(BIN)/python -m pip download --quiet --no-deps --require-hashes --dest $(WHEELHOUSE) \
		--requirement $(VENV)/build-tools.txt
	@touch $(STAMP)

venv: $(STAMP)  ## Create .venv and install requirements.lock, Host and the agent

$(UV_STAMP):
	@test -x $(LOCK_TOOLS)/bin/python || $(PYTHON) -m venv $(LOCK_TOOLS)
	$(LOCK_TOOLS)/bin/python -m pip install --quiet uv==$(UV_VERSION)
	@touch $(UV_STAMP)

# One command after a pyproject.toml change: re-resolve (every pin that still fits is kept), install the new
# lock and regenerate the image pins from it. `make upgrade` does the same with the newest allowed versions.
lock: $(UV_STAMP)  ## Re-resolve requirements.lock from pyproject.toml, install it, regenerate docker/*-requirements.txt
	printf '%s\n' pip setuptools wheel | $(UV) pip compile --quiet --universal --python-version 3.11 \
		--generate-hashes --all-extras --custom-compile-command "make lock" $(UV_COMPILE_ARGS) \
		--output-file $(LOCK) pyproject.toml agent/pyproject.toml -
	$(MAKE) venv
	$(BIN)/python scripts/image_requirements.py

upgrade:  ## `make lock` with every package at its newest allowed version
	$(MAKE) lock UV_COMPILE_ARGS=--upgrade

# Ports (PORT, FOREST_EDGE_HTTP_PORT, FOREST_EDGE_HTTPS_PORT, FOREST_LOCAL_PROXY_PORT) come from the environment,
# else var/forest.env, else 8000/8081/8443/8480 (apps/core/localenv.py). honcho hands its base port to the
# Procfile's first line (web) as $$PORT.
run: $(STAMP)  ## Local settings, migrate, load the demo and serve Host (web on PORT, default 8000, + worker + beat); Ctrl-C stops all
	@mkdir -p var/broker/queue var/broker/processed var/broker/control
	@echo "==> local settings (var/forest.env) and the database"
	$(RUN_ENV) $(BIN)/python -m apps.core.localenv
	@echo "==> migrating"
	$(RUN_ENV) $(BIN)/python manage.py migrate --noinput
	$(RUN_ENV) $(BIN)/python manage.py load_demo
	@echo "Forest Host on $$($(BIN)/python -m apps.core.localenv --get FOREST_HOST)/  (admin: /admin/, API schema: /api/schema/)"
	$(RUN_ENV) $(BIN)/honcho start -f Procfile --port "$$($(BIN)/python -m apps.core.localenv --get PORT)"

test: $(STAMP)  ## Architecture contracts, types, the image linter, then the whole suite against real PostgreSQL and Redis
	$(BIN)/lint-imports
	$(BIN)/python scripts/typecheck.py
	$(BIN)/hadolint docker/host.Dockerfile docker/controller.Dockerfile
	@scripts/services-up.sh
	$(TEST_ENV) $(BIN)/python -m pytest $(PYTEST_ARGS)

fuzz: $(STAMP)  ## The API fuzz and hostile corpus with many more examples (FOREST_FUZZ_EXAMPLES, default 150)
	@scripts/services-up.sh
	$(TEST_ENV) FOREST_FUZZ_EXAMPLES=$${FOREST_FUZZ_EXAMPLES:-150} $(BIN)/python -m pytest -q \
		tests/core/test_schemathesis_api.py tests/core/test_hostile.py tests/groves/test_schemathesis.py

mutation: $(STAMP)  ## Break each curated rule (scripts/mutation_check.py) and check its tests notice; prints the score
	@scripts/services-up.sh
	$(TEST_ENV) $(BIN)/python scripts/mutation_check.py $(MUTANTS)

lint: $(STAMP)  ## ruff, the import-linter contracts and mypy (strict modules clean, the rest under mypy-baseline.json)
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/python scripts/typecheck.py

clean:  ## Remove the venv and local state
	rm -rf $(VENV) var staticfiles
