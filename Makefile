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

.PHONY: demo test test-long lint bench bench-quick readme notebooks lab clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check uv
	$(UV) pip install --quiet --python $(PY) -e ".[test,bench,demo,notebooks,docs,dist]"
	$(PY) -m pip install --quiet --disable-pip-version-check "$(TORCH)"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m minigrad demo --out build

test: $(STAMP)
	$(PY) -m ruff check minigrad tests benchmarks scripts
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q

# The long hypothesis profile: many more examples per property (see tests/conftest.py).
test-long: $(STAMP)
	HYPOTHESIS_PROFILE=long $(PY) -m pytest -q

# Execute every notebook in notebooks/ (outputs go to build/notebooks/, the sources stay clean).
notebooks: $(STAMP)
	$(PY) scripts/notebooks.py

# The notebooks in JupyterLab (installs the `lab` extra on first use).
lab: $(STAMP)
	$(UV) pip install --quiet --python $(PY) -e ".[lab]"
	$(VENV)/bin/jupyter lab notebooks

readme: $(STAMP)
	$(PY) scripts/update_readme.py

bench: $(STAMP)
	$(PY) benchmarks/run.py --dtypes float32,float64 --wait-idle 600 --json benchmarks/results.json --docs docs/benchmarks.md
	$(PY) benchmarks/exact_batchnorm.py

bench-quick: $(STAMP)
	$(PY) benchmarks/run.py --quick

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
