# Every target creates and fills .venv itself when it is missing or stale.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXTRAS := local,dev,cdk

.PHONY: install demo test lint format bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[$(EXTRAS)]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/shardlog demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

test: lint cdk-cli
	$(BIN)/pytest

bench: $(STAMP)
	$(BIN)/python bench/ingest.py

clean:
	rm -rf $(VENV) .shardlog .pytest_cache .mypy_cache .ruff_cache cdk.out node_modules

# The CDK CLI pinned in package.json / package-lock.json (tests/infra runs `npx cdk synth`).
.PHONY: cdk-cli
cdk-cli: node_modules/.installed

node_modules/.installed: package-lock.json
	npm ci --no-audit --no-fund
	touch $@
