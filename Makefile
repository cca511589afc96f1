# Two commands do all set-up on a fresh machine: `make demo` and `make test` (both idempotent).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.cleverthis-installed
# Tools the steps call by name (jupyter-builder, jupyter, ray) come from the project's venv.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: install install-tf demo test lint test-unit test-integration test-js bench clean chromium

$(PY):
	$(PYTHON) -m venv $(VENV)

# Re-installs when the package's metadata or the front-end's dependencies change.
$(STAMP): pyproject.toml js/package.json js/package-lock.json | $(PY)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "torch==2.13.0"
	@# A previous `labextension develop` links the venv's share folder to jupyter_cleverthis/labextension, so the
	@# editable install's install.json lands there and the next wheel build would add it twice: undo both.
	if [ -L $(VENV)/share/jupyter/labextensions/jupyter-cleverthis ]; then rm $(VENV)/share/jupyter/labextensions/jupyter-cleverthis; fi
	rm -f jupyter_cleverthis/labextension/install.json
	$(PY) -m pip install -q -e ".[train,dev]"
	$(VENV)/bin/jupyter labextension develop --overwrite . >/dev/null
	touch $@

install: $(STAMP)

# framework: tensorflow jobs run in their own environment (TensorFlow never enters .venv): README, "TensorFlow".
# The same base python as .venv (Ray needs the same Python and Ray versions on both sides).
TF_VENV ?= .venv-tf
TF_STAMP := $(TF_VENV)/.cleverthis-installed
$(TF_STAMP): requirements-tf.txt | $(PY)
	test -x $(TF_VENV)/bin/python || "$$($(PY) -c 'import sys; print(sys._base_executable)')" -m venv $(TF_VENV)
	$(TF_VENV)/bin/python -m pip install -q --upgrade pip
	$(TF_VENV)/bin/python -m pip install -q -r requirements-tf.txt
	touch $@

install-tf: $(TF_STAMP)

demo: install
	$(PY) examples/demo.py

lint: install
	$(VENV)/bin/ruff check .

test-js: install
	cd js && npm test

# The UI tests (tests/ui) drive Debian's Chromium with Playwright (never `playwright install`).
chromium:
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)

# The browser tests run in their own pytest process: Playwright's sync API leaves an asyncio loop running in
# the main thread, which breaks pytest-jupyter's per-test event loops of any test collected after them.
test: lint test-js chromium install-tf
	$(PY) -m pytest -q -ra --durations=15 --ignore=tests/ui
	$(PY) -m pytest -q -ra tests/ui

bench: install
	$(PY) -m bench

clean:
	rm -rf $(VENV) $(TF_VENV) js/node_modules js/lib jupyter_cleverthis/labextension jupyter_cleverthis/widgets/static .cache
