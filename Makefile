# The two commands of the README: `make demo` and `make test`. Both create the local virtualenv
# first. torch is pinned to the 2.13.0 CPU build that lies on this kind of machine; an open range
# would pull a multi-GB CUDA build.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_PIN ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: install demo test lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_PIN)
	$(PY) -m pip install -q -e '.[dev]'
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium) || echo "chromium not installed: the browser test will skip (fail under CI=true)"
	touch $(STAMP)

demo: install
	$(VENV)/bin/normfree demo

test: install
	$(VENV)/bin/ruff check normfree tests bench
	$(PY) -m pytest -q

lint: install
	$(VENV)/bin/ruff check normfree tests bench
	$(VENV)/bin/ruff format --check normfree tests bench

bench: install
	for b in bench/bench_*.py; do $(PY) $$b --quick || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
