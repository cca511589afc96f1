# Two commands do all set-up on a fresh machine: `make demo` and `make test` (both idempotent).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.cleverthis-installed
# The exact versions this project is tested with (pyproject.toml keeps ranges) are in constraints.txt. The dev venv is
# installed with uv (`uv pip install`, ~50 s instead of pip's ~120 s with warm caches); the user's install
# (tests/wheel/check.py) stays pip's. uv reads no pip configuration: a find-links folder set for pip (this machine's
# local torch CPU wheel) is passed on. Installed files are byte-compiled (in parallel): without it every Ray worker
# compiled torch's and transformers' modules on import, all at once (the wheel check's LoRA job 134 s instead of 53 s).
UV := $(VENV)/bin/uv pip install -q --python $(PY) --compile-bytecode -c constraints.txt \
  $(foreach links,$(PIP_FIND_LINKS),--find-links $(links))
# Tools the steps call by name (jupyter, ray, cleverthis-train) come from the project's venv.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
# What outlives a clean clone on this machine (CI included): the TensorFlow environment and the DeepSpeed op cache.
CACHE ?= $(HOME)/.cache/cleverthis
# The same folder `cleverthis-train setup tensorflow` uses under the CLEVERTHIS_HOME the wheel check runs with.
WHEEL_HOME ?= $(CACHE)/home
TF_ENV ?= $(WHEEL_HOME)/envs/tensorflow
export CLEVERTHIS_TF_PYTHON ?= $(TF_ENV)/bin/python
# Each stage prints its time and adds it to this file (.ci/run prints the summary).
export CLEVERTHIS_STAGES ?= $(CURDIR)/.cache/stages.txt
STAGE := $(CURDIR)/.ci/stage

.PHONY: docs wheel-venv test-wheel-check test-serial test-late hub-proxy install install-tf demo test test-fast lint test-unit test-js types test-wheel test-pytest test-ui bench clean chromium

$(PY):
	$(PYTHON) -m venv $(VENV)

# Re-installs when the package's metadata or the front-end's dependencies change.
$(STAMP): pyproject.toml constraints.txt js/package.json js/package-lock.json | $(PY)
	$(PY) -m pip install -q --disable-pip-version-check uv
	$(UV) torch
	@# `jupyter builder develop` links the venv's share folder to jupyter_cleverthis/labextension, so the editable
	@# install's install.json would land there and the next wheel build would add it twice: undo both first.
	if [ -L $(VENV)/share/jupyter/labextensions/jupyter-cleverthis ]; then rm $(VENV)/share/jupyter/labextensions/jupyter-cleverthis; fi
	rm -f jupyter_cleverthis/labextension/install.json
	$(UV) -e ".[train,dev,docs]"
	$(VENV)/bin/jupyter builder develop --overwrite . >/dev/null
	@# DeepSpeed's JIT-built ops are cached per environment and versions (strategies.environment_key). ninja
	@# rebuilds them when a source or header is newer than the build, and an installer may stamp the files it
	@# installs with the install time: a re-made venv would rebuild cpu_adam (~65 s of 2 cores) for byte-identical
	@# sources. (A venv at another path rebuilds anyway: its include paths change the compile command.)
	@# The op sources and torch's headers get one fixed date instead (C++ sources and headers only, never a .py file).
	find $(VENV)/lib/python*/site-packages/deepspeed/ops/csrc $(VENV)/lib/python*/site-packages/torch/include \
	  -type f -exec touch -d 2000-01-01 {} +
	touch $@

install: $(STAMP)

# framework: tensorflow jobs run in their own environment (docs/tensorflow.md), built by the same command users
# run (`cleverthis-train setup tensorflow`); it is up to date in a second when nothing changed.
install-tf: install
	$(VENV)/bin/cleverthis-train setup tensorflow --path $(TF_ENV)

demo: install
	$(PY) examples/demo.py

lint: install
	$(VENV)/bin/ruff check .

test-js: install
	cd js && npm test

# The manual (docs/, Sphinx + MyST) into docs/_build/html. Warnings are errors, and -n makes every internal reference
# a checked one (a broken link or a missing page fails); nothing is fetched. The reference pages (job spec, CLI, REST,
# error kinds) are written from the code as the build starts (docs/_ext/cleverthis_reference.py).
docs: install
	$(VENV)/bin/sphinx-build -W --keep-going -n -q -b html docs docs/_build/html

# After a change to the pydantic models (service/models.py, spec.py, event_models.py): re-export their JSON Schemas
# and the front-end's types generated from them (js/src/shared/generated; tests fail while these are stale).
types: install
	$(PY) -m jupyter_cleverthis.schemas js/src/shared/generated
	cd js && npm run build:types

# The UI tests (tests/ui) drive Debian's Chromium with Playwright (never `playwright install`).
chromium:
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)

# The user's install: build the sdist and the wheel, install the wheel into a fresh venv without node, check it.
# wheel-venv does the build and the install (from a copy of the tree, with the base Python: it needs no .venv);
# test-wheel-check the rest. `make test` runs wheel-venv beside `install`: two pip installs, one core each.
wheel-venv:
	$(PYTHON) tests/wheel/check.py --phase prepare --constraints constraints.txt

test-wheel-check: install-tf
	CLEVERTHIS_WHEEL_HOME=$(WHEEL_HOME) $(STAGE) wheel $(PY) tests/wheel/check.py --phase check --constraints constraints.txt --tf-env $(TF_ENV)

test-wheel: wheel-venv
	$(MAKE) --no-print-directory test-wheel-check

# While developing: the unit tests and one real-Ray smoke job (a few minutes).
test-fast: install
	$(STAGE) test-fast $(PY) -m pytest -q -ra -x tests/unit tests/integration/test_finetune.py::test_cli_wait_and_json

# The browser tests run in their own pytest process: Playwright's sync API leaves an asyncio loop running in
# the main thread, which breaks pytest-jupyter's per-test event loops of any test collected after them.
# Three xdist workers share one Ray head (tests/conftest.py); the tests marked serial run alone afterwards.
PYTEST_WORKERS ?= 3
test-pytest: install-tf
	$(STAGE) pytest $(PY) -m pytest -q -ra --durations=30 -n $(PYTEST_WORKERS) --dist worksteal -m "not serial and not bench" --ignore=tests/ui

# The serial tests and the browser tests run side by side, each with a Ray head of its own (make -j2). The serial
# lane runs at a lower CPU priority (its processes and its Ray head inherit it): beside it at equal priority, two
# browser clicks waited over 60 s for a starved Chromium renderer (2 cores, load 8-11), while the serial tests only
# wait for their own jobs and have minutes of slack in that lane.
SERIAL_NICE ?= nice -n 5
test-serial: install-tf
	$(SERIAL_NICE) $(STAGE) pytest-serial $(PY) -m pytest -q -ra --durations=5 -m serial --ignore=tests/ui

# JupyterHub's proxy for the multi-user browser test (tests/ui/test_jupyterhub.py), from npm, outside the checkout.
CHP := $(CACHE)/chp/node_modules/.bin/configurable-http-proxy
$(CHP):
	npm install --silent --no-audit --no-fund --prefix $(CACHE)/chp configurable-http-proxy@5 >/dev/null

hub-proxy: $(CHP)

test-ui: install chromium hub-proxy
	$(STAGE) ui $(PY) -m pytest -q -ra --durations=8 tests/ui

test:
	@mkdir -p $(dir $(CLEVERTHIS_STAGES))
	@# The wheel's build and fresh venv (single-core pip, like the dev install) use the second core meanwhile.
	$(STAGE) install $(MAKE) --no-print-directory -j3 -Otarget wheel-venv install-tf chromium hub-proxy
	$(STAGE) lint+js $(MAKE) --no-print-directory lint test-js docs
	$(MAKE) --no-print-directory test-pytest
	$(MAKE) --no-print-directory -j2 -Otarget test-late test-ui

# The last lane beside the browser tests: the serial tests, then the wheel check (its venv was made in the install
# stage; what is left is a Ray head and two tiny jobs, ~2 min). The lane ran ~2.5 min shorter than the browser
# tests, and the check then cost a stage of its own. At most one Ray head runs in this lane at a time, at the
# serial lane's lower priority. (Its pip, when the check still installed the wheel, took 900 s beside pytest.)
test-late: install-tf
	$(MAKE) --no-print-directory test-serial
	$(SERIAL_NICE) $(MAKE) --no-print-directory test-wheel-check

# The slow end-to-end checks (pytest -m bench) run here, beside the measurements: the example notebooks whose
# features the integration tests cover one by one (sweeps, tracking, QLoRA + DeepSpeed).
bench: install-tf
	$(PY) -m pytest -q -ra -m bench tests/integration
	$(PY) -m bench
	$(PY) -m bench.scale

clean:
	rm -rf $(VENV) js/node_modules js/lib jupyter_cleverthis/labextension jupyter_cleverthis/widgets/static .cache dist
