# Everything installs into .venv/ in the repository: Python 3.12 (from pyenv's
# .python-version), then the locked dependencies through uv. Bytecode is compiled at
# install: where PYTHONDONTWRITEBYTECODE is set, every process (each CLI call, each test's
# subprocess, each run worker) would otherwise compile Dagster and the rest from source.
PYTHON ?= $(shell command -v python3.12 2>/dev/null || command -v python3)
VENV := .venv
INSTALLED := $(VENV)/.installed
UV_VERSION := 0.13.8

.PHONY: install demo test bench dev clean services services-stop

$(INSTALLED): pyproject.toml uv.lock
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	@test -x $(VENV)/bin/uv || $(VENV)/bin/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	$(VENV)/bin/uv sync --frozen --quiet --compile-bytecode --python $(VENV)/bin/python
	@$(VENV)/bin/python -m compileall -q mce_dagster
	@touch $@

install: $(INSTALLED)

demo: install
	$(VENV)/bin/mce demo

test: install
	$(VENV)/bin/python -m pytest

# The Dagster UI on the instance the CLI and the demo write to: $DAGSTER_HOME and
# $MCE_HOME when set (else .mce/dagster and .mce), its dagster.yaml written or
# upgraded first; events stored in batches, as in the runs `mce` starts.
dev: install
	@export MCE_HOME="$${MCE_HOME:-$(CURDIR)/.mce}"; \
	export DAGSTER_HOME="$${DAGSTER_HOME:-$$MCE_HOME/dagster}"; \
	export DAGSTER_EVENT_BATCH_SIZE="$${DAGSTER_EVENT_BATCH_SIZE:-1000}"; \
	$(VENV)/bin/python -m mce_dagster.instance.local "$$DAGSTER_HOME" && \
	exec $(VENV)/bin/dagster dev -w workspace.yaml

bench: install
	$(VENV)/bin/python bench/evaluate.py

# What Dagster's bookkeeping costs per (asset, partition) on each instance storage.
.PHONY: bench-bookkeeping
bench-bookkeeping: install
	$(VENV)/bin/python bench/bookkeeping.py

# Judge calls, tokens and cost per session per judged metric, and concurrent calls
# against sequential ones, on the local OpenAI-compatible server (no key, no network).
.PHONY: bench-judge
bench-judge: install
	$(VENV)/bin/python bench/judge.py

# AnswerRelevancy native, through DeepEval and through Ragas on the same sessions: judge
# calls, tokens and cost per session side by side, on the local server (no key, no network).
.PHONY: bench-providers
bench-providers: install
	$(VENV)/bin/python bench/providers.py

# Peak RSS of `mce ingest` on synthetic exports of 50, 100 and 200 MB, side by side,
# and once with every batch at its byte limit: memory is bounded by the batch, not the file.
.PHONY: bench-ingest
bench-ingest: install
	$(VENV)/bin/python bench/ingest_memory.py --byte-bound

# From a session's announcement to its results in the graph through the queue sensor
# and dagster-daemon (median and p95 over a burst of 500), and the Neo4j backend against
# the embedded FalkorDB on one batch (ingest + evaluate), on the services of
# `make services` (started if they are not running).
#   make bench-latency LATENCY_ARGS="--sessions 1000 --batch 300"
.PHONY: bench-latency
bench-latency: install
	@eval "$$(bash services/services.sh up)" && $(VENV)/bin/python bench/latency.py $(LATENCY_ARGS)

# 100,000 session partitions against 1,000: registering them, a sensor tick and the
# GraphQL queries of the UI's asset graph and partition pages, on each instance storage.
.PHONY: bench-partitions
bench-partitions: install
	@eval "$$(bash services/services.sh up)" && for storage in sqlite postgres; do \
	  $(VENV)/bin/python bench/partitions.py --sizes 1000 100000 --storage $$storage || exit 1; done

# Ingestion and evaluation of 1,000 / 10,000 / 100,000 synthetic sessions against the
# three floors (plain Python, plain graph calls, no-op Dagster materializations) on each
# graph backend and instance storage, on the services of `make services`. Hours at 100k:
#   make bench-scale SCALE_SIZES="1000 10000 100000"
SCALE_SIZES ?= 1000 10000
.PHONY: bench-scale
bench-scale: install
	@eval "$$(bash services/services.sh up)" && for n in $(SCALE_SIZES); do \
	  for backend in embedded neo4j; do for storage in sqlite postgres; do \
	    $(VENV)/bin/python bench/scale.py --sessions $$n --backend $$backend --storage $$storage $(SCALE_ARGS) || exit 1; \
	  done; done; done

# N synthetic sessions through the mce CLI on the embedded default (synth, ingest, one
# `mce compute --all --workers $(BACKFILL_WORKERS)`), on a fresh home: at 100,000, 1 h 44 min
# on a quiet 2-core machine, 18 GB of memory and 64 GB of disk (bench/README.md).
#   make bench-backfill BACKFILL_SESSIONS=10000
BACKFILL_SESSIONS ?= 100000
BACKFILL_WORKERS ?= 2
.PHONY: bench-backfill
bench-backfill: install
	$(VENV)/bin/python bench/backfill.py --sessions $(BACKFILL_SESSIONS) --workers $(BACKFILL_WORKERS)

# A Celery worker for the code location mce_dagster.definitions_celery (deploy/README.md):
# it takes steps from the broker of RABBITMQ_URL and runs them on the instance and the
# graph the run names (the local ones of $DAGSTER_HOME and $MCE_HOME here). One per
# core or machine, each with its own name:
#   make celery-worker CELERY_WORKER=worker-2
CELERY_WORKER ?= mce-worker
.PHONY: celery-worker
celery-worker: install
	@test -n "$$RABBITMQ_URL" || { echo 'celery-worker: RABBITMQ_URL is not set (eval "$$(make -s services)")' >&2; exit 1; }
	@export MCE_HOME="$${MCE_HOME:-$(CURDIR)/.mce}"; \
	export DAGSTER_HOME="$${DAGSTER_HOME:-$$MCE_HOME/dagster}"; \
	export DAGSTER_EVENT_BATCH_SIZE="$${DAGSTER_EVENT_BATCH_SIZE:-1000}"; \
	export PATH="$(CURDIR)/$(VENV)/bin:$$PATH"; \
	$(VENV)/bin/python -m mce_dagster.instance.local "$$DAGSTER_HOME" && \
	exec dagster-celery worker start -A dagster_celery.app -y deploy/celery.yaml -n $(CELERY_WORKER) -- --concurrency=1

# Dagster's own event-log conformance suite of a release (from its sdists), on the stock
# storages and on the project's, in a scratch virtualenv under .mce/check-dagster/ with
# that release beside the rest of uv.lock: prints passed/failed per storage and HOLDS, or
# the tests that fail on the project's storages only. The PostgreSQL half runs where
# DAGSTER_PG_* points at a server (eval "$$(make -s services)"). Default: the pinned release.
#   make check-dagster DAGSTER_VERSION=1.13.28
DAGSTER_VERSION ?= $(shell sed -n 's/^ *"dagster==\([0-9.]*\)",*$$/\1/p' pyproject.toml)
.PHONY: check-dagster
check-dagster: install
	$(VENV)/bin/python tests/check_dagster.py $(DAGSTER_VERSION)

# Property-based fuzzing of ingestion (tests/test_fuzz_ingest.py) under its "fuzz"
# profile: FUZZ_EXAMPLES examples per test (5000 unless set; the suite runs 250).
#   make fuzz FUZZ_EXAMPLES=2000
.PHONY: fuzz
fuzz: install
	HYPOTHESIS_PROFILE=fuzz $(VENV)/bin/python -m pytest tests/test_fuzz_ingest.py -p no:cacheprovider --hypothesis-show-statistics

# docs/metric-reference.md, written from metric_defs/ and the providers' definitions
# (tests/test_docs.py fails when the checked-in page is not current).
.PHONY: docs
docs: install
	$(VENV)/bin/python -m mce_dagster.catalog.reference > docs/metric-reference.md

clean:
	-$(VENV)/bin/mce kg stop
	rm -rf $(VENV) .mce

# Real Neo4j 5, RabbitMQ and PostgreSQL on loopback (services/services.sh), idempotent:
#   eval "$$(make -s services)"
# Standard output is only `export NAME=value` lines; progress goes to stderr, logs to
# .mce/services/. services-stop stops what services started, and only that.
services:
	@bash services/services.sh up

services-stop:
	@bash services/services.sh down
