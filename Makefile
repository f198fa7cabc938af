# Two commands on a fresh machine: `make demo` and `make test`.
# Both create .venv if it is missing and install the package with what it needs (idempotent).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
STAMP := $(VENV)/.installed
# PyTorch (CPU) is the oracle and the CuPy stand-in of the tests. pip installs it, not uv:
# pip honours this machine's pip configuration (a local CPU wheel); uv ignores it and would
# pull a multi-GB CUDA build.
TORCH := torch==2.13.0

.PHONY: demo test test-long mutants lint bench bench-gpu bench-pages bench-quick readme notebooks lab docs serve browser clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check uv
	$(UV) pip install --quiet --python $(PY) -e ".[test,bench,demo,notebooks,docs,dist,mutation]"
	$(PY) -m pip install --quiet --disable-pip-version-check "$(TORCH)"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m minigrad demo --out build

test: $(STAMP) browser
	$(PY) -m ruff check minigrad tests benchmarks scripts docs_hooks notebooks mutation
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q

# The long hypothesis profile: many more examples per property (see tests/conftest.py).
test-long: $(STAMP)
	HYPOTHESIS_PROFILE=long $(PY) -m pytest -q

# Mutation testing of the accumulation rule, the optimizers, the losses and the embedding, each
# against its own tests on one worker (docs/mutation.md records each run time; about 8 and
# 6 minutes for the first two groups here; not part of `make test`): writes
# mutation/results.json and docs/mutation.md. MUTANT_GROUPS="--group optimizers" runs one.
mutants: $(STAMP)
	$(PY) scripts/mutants.py $(MUTANT_GROUPS)

# Execute every notebook in notebooks/ (outputs go to build/notebooks/, the sources stay clean).
notebooks: $(STAMP)
	$(PY) scripts/notebooks.py

# The notebooks in JupyterLab (installs the `lab` extra on first use).
lab: $(STAMP)
	$(UV) pip install --quiet --python $(PY) -e ".[lab]"
	$(VENV)/bin/jupyter lab notebooks

# The site (mkdocs-material): a strict build into site/, or served at http://127.0.0.1:8000.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --dev-addr 127.0.0.1:8000

# Debian's chromium for the site's browser test (Playwright's own browser download does not
# work here). Installed as root or with sudo where /usr/bin/chromium is missing; never fails
# the make run: where it cannot be installed, the browser test is skipped and says so.
browser:
	@if [ -x /usr/bin/chromium ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then SUDO=; elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO=sudo; \
	else echo "browser: /usr/bin/chromium is missing and installing it needs root; the site's browser test will be skipped"; exit 0; fi; \
	echo "browser: installing Debian's chromium for the site's browser test"; \
	{ $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
	|| echo "browser: apt-get could not install chromium; the site's browser test will be skipped"; \
	exit 0

readme: $(STAMP)
	$(PY) scripts/update_readme.py

# The language model's step (issue 36) has its own record, a section of docs/benchmarks.md.
bench: $(STAMP)
	$(PY) benchmarks/run.py --shapes lm --dtypes float32,float64 --wait-idle 600 --json benchmarks/results-lm.json
	$(PY) benchmarks/run.py --dtypes float32,float64 --wait-idle 600 --json benchmarks/results.json --docs docs/benchmarks.md --lm-results benchmarks/results-lm.json --gpu-results benchmarks/results-gpu.json
	$(PY) benchmarks/exact_batchnorm.py
	$(PY) benchmarks/memory.py --json benchmarks/memory.json --docs docs/benchmarks-memory.md --gpu-results benchmarks/memory-gpu.json
	$(PY) benchmarks/torch_check.py --json benchmarks/torch-check.json --docs docs/benchmarks-checker.md

# On a machine with a CUDA GPU, CuPy and PyTorch for CUDA (PYTHON=python3 there): the GPU runs,
# whose records `make bench` and `make bench-pages` render as the pages' GPU sections.
bench-gpu:
	$(PYTHON) benchmarks/run.py --shapes large,accum,xl --dtypes float32,float64 --impls minigrad-cupy,cupy,torch-cuda --json benchmarks/results-gpu.json
	$(PYTHON) benchmarks/memory.py --device gpu --json benchmarks/memory-gpu.json

# The two pages from the saved records, measuring nothing.
bench-pages: $(STAMP)
	$(PY) benchmarks/run.py --from-json benchmarks/results.json --docs docs/benchmarks.md --lm-results benchmarks/results-lm.json --gpu-results benchmarks/results-gpu.json
	$(PY) benchmarks/memory.py --from-json benchmarks/memory.json --docs docs/benchmarks-memory.md --gpu-results benchmarks/memory-gpu.json
	$(PY) benchmarks/torch_check.py --from-json benchmarks/torch-check.json --docs docs/benchmarks-checker.md

bench-quick: $(STAMP)
	$(PY) benchmarks/run.py --quick

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
