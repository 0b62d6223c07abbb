# attention-zoo: `make run` sets up and runs the main job; `make test` sets up and runs the tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Local copies of the data sets (the datamodules also download from each set's public home).
ZOO_DATA_DIR ?= $(abspath ../shared/data)
export ZOO_DATA_DIR
RECIPE ?= recipes/transformer_lm/pg19mini.yaml
# where RECIPE's ModelCheckpoint writes its best checkpoint
CKPT ?= runs/transformer_lm/pg19mini/checkpoints/best.ckpt
PROMPT ?= It was a cold night in the village, and

.PHONY: setup run test lint

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# torch first: without it pip would resolve the CUDA build of a newer torch for lightning
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[dev]"
	touch $@

setup: $(VENV)/.installed

run: setup
	$(BIN)/zoo fit --config $(RECIPE)
	$(BIN)/zoo validate --config $(RECIPE) --ckpt_path $(CKPT) --trainer.limit_val_batches 1.0
	$(BIN)/zoo test --config $(RECIPE) --ckpt_path $(CKPT)
	$(BIN)/zoo generate --checkpoint $(CKPT) --prompt "$(PROMPT)" --max-new-tokens 400 \
		--temperature 0.8 --top-k 40 --seed 0

test: setup
	$(BIN)/python -m pytest -q

lint: setup
	$(BIN)/ruff check zoo kernels tests
