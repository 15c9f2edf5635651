# scorestream: the two commands a newcomer needs are `make demo` and `make test`.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
LOCKED ?= 1

.PHONY: install models demo test test-fast lint typecheck check schemas bench lock k8s-rules clean

# The fitted safety and trait classifiers the package ships (scorestream models build):
# built from the training data, never at a worker's start-up; and the shipped safety
# patterns' prefilter facts (built from the patterns and the code that reads them).
ARTEFACTS := worker/models/safety_classifier/manifest.json worker/models/trait_classifier/manifest.json worker/models/safety_prefilter/facts.json
MODEL_DATA := $(filter-out worker/data/safety_replies_heldout%,$(wildcard worker/data/safety_replies*.yaml)) worker/data/trait_sentences.yaml $(wildcard worker/data/safety_patterns*.yaml) worker/suites/literal_prefilter.py

install: $(STAMP) $(ARTEFACTS)

models: $(STAMP)
	$(VENV)/bin/scorestream models build

$(ARTEFACTS) &: $(STAMP) $(MODEL_DATA)
	$(VENV)/bin/scorestream models build

$(STAMP): pyproject.toml deploy/requirements.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# CPU build of torch first (it lies on disk); an unpinned torch pulls CUDA wheels.
	$(PY) -m pip install --quiet torch==2.13.0
	# Every package the image ships at the image's version: the lock's pins, without their
	# hashes (the editable package and the dev tools, not in the lock, have none), as
	# constraints. Upgrading: `make install LOCKED=` (free resolution), then `make lock`.
	grep -oE '^[A-Za-z0-9][A-Za-z0-9._-]*==[^ ]+' deploy/requirements.lock > $(VENV)/locked.txt
	$(PY) -m pip install --quiet $(if $(LOCKED),-c $(VENV)/locked.txt) -e ".[dev]"
	# The project's own modules compiled once (pip does it for the others): a machine that
	# sets PYTHONDONTWRITEBYTECODE would otherwise compile them at every start.
	$(PY) -m compileall -q worker schemas topics
	touch $(STAMP)

demo: install
	$(VENV)/bin/scorestream demo

# PYTHONDONTWRITEBYTECODE= : pytest keeps the test modules it rewrote for their asserts
# (a machine that sets the variable rewrote every module in every run, ~6 s per worker)
# Two test processes on two cores. Three would finish sooner (a third of the suite waits
# on real clocks: measured 1,375 s of tests with two, 929 s with three), but with three
# the broker fault tests in tests/test_health.py failed in two of three full runs: one a
# stop that hung (fixed since: topic_watch.StopDeadline), the other a table recovery after
# a broker restart that never finished (cause not known); with two they have passed every run.
# --dist loadgroup: the tests that refit a model share one process (tests/conftest.py).
TEST_WORKERS ?= 2
test: install
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

# The fast lane a change is checked with first, unit tests: no broker, no model, no
# refitting, no command line run in its own process (`make test` runs all).
test-fast: install
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -n 2 -m "not integration and not model and not build and not system"

# lint and typecheck need the packages, not the fitted models: CI runs them while the
# models build (`make -j2 install lint typecheck`).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

check: lint typecheck test

schemas: install
	$(PY) -m schemas.export

bench: install
	$(PY) bench/stream.py

lock: install        # deploy/requirements.lock, from which the Docker image installs
	$(PY) deploy/make_lock.py

k8s-rules: install   # deploy/k8s/base/prometheusrule.yaml from deploy/prometheus/alerts.yml
	$(PY) deploy/k8s/render_rules.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info worker/models
