# attention-zoo: `make run` sets up and runs the main job; `make test` sets up and runs the tests.
# The main job works offline on the published checkpoint shipped in checkpoints/ (no training):
# it lists the published checkpoints, re-measures the registered test bits per byte and samples text.
# `make train` trains the short recipe of that model from scratch (~10 min on 2 CPU cores); the
# published checkpoint's own recipe, named after it, trains 7,680 steps (about 42 min on 1 thread):
# make train RECIPE=recipes/transformer_lm/transformer_lm_small.pg19mini.yaml CKPT=runs/transformer_lm/pg19mini_v3/checkpoints/best.ckpt
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Local copies of the data sets (the datamodules also download from each set's public home).
ZOO_DATA_DIR ?= $(abspath ../shared/data)
export ZOO_DATA_DIR
CHECKPOINT ?= transformer_lm_small.pg19mini
RECIPE ?= recipes/transformer_lm/pg19mini.yaml
# where RECIPE's ModelCheckpoint writes its best checkpoint
CKPT ?= runs/transformer_lm/pg19mini/checkpoints/best.ckpt
PROMPT ?= It was a cold night in the village, and
SENTENCES ?= Ein Mann fährt mit dem Fahrrad durch den Park.

comma := ,

.PHONY: setup run train test lint lock test-latest docs

# Every dependency at the exact version of requirements/lock.txt (the versions the suite passed
# with), then the zoo itself without resolving or downloading anything more (built with the
# lock's setuptools, not the newest one). The lock holds the extras too: triton
# (the kernels on a GPU; on a CPU their tests run in Triton's interpreter), transformers and lm-eval
# (the integrations), the dev tools and docs (the site's generator, `make docs`). `make lock`
# refreshes it; `make test-latest` tries the newest.
LOCK := requirements/lock.txt
EXTRAS := dev,triton,transformers,lm-eval,docs

$(VENV)/.installed: $(LOCK) pyproject.toml
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -r $(LOCK)
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	touch $@

setup: $(VENV)/.installed

# Re-resolve the lock from pyproject.toml's ranges (pip-tools; pip's own settings find the CPU
# build of torch; requirements/constraints.txt says what it may not take, and why). Review the
# diff, run `make test`, commit.
lock: setup
	$(BIN)/pip-compile -q --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links \
		$(foreach e,$(subst $(comma), ,$(EXTRAS)),--extra $(e)) \
		--constraint requirements/constraints.txt --output-file $(LOCK) pyproject.toml
	@echo "$(LOCK) refreshed: review 'git diff $(LOCK)', then 'make test' and commit it."

run: setup
	$(BIN)/zoo list
	$(BIN)/zoo verify $(CHECKPOINT)
	$(BIN)/zoo evaluate $(CHECKPOINT) --registered
	$(BIN)/zoo generate --checkpoint $(CHECKPOINT) --prompt "$(PROMPT)" --max-new-tokens 400 \
		--temperature 0.8 --top-k 40 --seed 0
	printf '%s\n' "$(SENTENCES)" | $(BIN)/zoo translate --checkpoint transformer_small.multi30k

train: setup
	$(BIN)/zoo fit --config $(RECIPE)
	$(BIN)/zoo validate --config $(RECIPE) --ckpt_path $(CKPT) --trainer.limit_val_batches 1.0
	$(BIN)/zoo test --config $(RECIPE) --ckpt_path $(CKPT)
	$(BIN)/zoo generate --checkpoint $(CKPT) --prompt "$(PROMPT)" --max-new-tokens 400 \
		--temperature 0.8 --top-k 40 --seed 0

# Fashion-MNIST for the image tests: Debian's package holds the complete idx files
FASHION_MNIST := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

$(FASHION_MNIST):
	$(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq dataset-fashion-mnist

# The suite on both cores (pytest-xdist), then its precision-sensitive tests (`-m precision`: autocast
# dtypes, the LSTM, the kernels' CPU routes) again as an AVX2-only CPU: this torch's oneDNN honours
# ONEDNN_MAX_CPU_ISA and its ATen kernels ATEN_CPU_CAPABILITY, so an AMX machine checks both kinds.
test: setup $(FASHION_MNIST)
	$(BIN)/python -m pytest -q -n 2 --dist worksteal
	ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 $(BIN)/python -m pytest -q -n 2 --dist worksteal -m precision

# The drift check (not in CI): the newest releases pyproject.toml allows, in a venv of their own
# (torch included: the newest that pip may install here), then the suite. docs/dependencies.md
# records the last result.
LATEST := .venv-latest
test-latest: $(FASHION_MNIST)
	rm -rf $(LATEST)
	$(PYTHON) -m venv $(LATEST)
	$(LATEST)/bin/pip install -q --upgrade --upgrade-strategy eager -e ".[$(EXTRAS)]"
	$(LATEST)/bin/pip freeze --exclude-editable > $(LATEST)/versions.txt
	$(LATEST)/bin/python -m pytest -q -n 2 --dist worksteal -p no:cacheprovider

# The documentation site (mkdocs.yml) into site/, strict: a broken link or anchor, a nav entry
# without its page or a docstring that does not render fails it. `$(BIN)/mkdocs serve` previews it.
docs: setup
	$(BIN)/mkdocs build --strict --site-dir site

# ruff, and the layer contract in pyproject.toml (docs/architecture.md): an upward import fails here
lint: setup
	$(BIN)/ruff check zoo kernels tests
	$(BIN)/lint-imports
