# Fresh machine: `make demo` runs the product on the embedded default; `make test` runs the suite.
# Both create .venv and install the pinned CPU set from requirements.txt (+ the Ray extra, requirements-ray.txt) first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TRANSFORMERS_NO_ADVISORY_WARNINGS := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install test test-gpu demo clean

$(STAMP): requirements.txt requirements-ray.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -r requirements.txt -r requirements-ray.txt
	$(VENV)/bin/pip install --no-deps -e .
	$(VENV)/bin/pip check
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q --timeout=900 $(PYTEST_ARGS)

test-gpu: $(STAMP)
	$(PY) -m pytest -q -m gpu $(PYTEST_ARGS)

demo: $(STAMP)
	$(VENV)/bin/routedvlm demo $(DEMO_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
