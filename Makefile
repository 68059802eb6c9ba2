# Two commands: `make run` and `make test`. Everything is installed into .venv by this file.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test venv clean crash

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	$(BIN)/oap-log serve --data ./data

test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider

# 50 kill -9 cycles under load (a 5-cycle version runs in `make test`)
crash: $(STAMP)
	$(BIN)/python -m tests.crashharness --cycles 50

clean:
	rm -rf $(VENV) data
