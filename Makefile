# widebeam — two commands do all set-up: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch is enough for tests and the demo; a CUDA machine can install `.[gpu]`.
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.widebeam-installed

.PHONY: install test lint demo clean system-deps

install: $(STAMP) system-deps

# Tests and `widebeam up` start real redis-server processes; install it from the distribution
# when it is missing (root, or sudo without a password).
system-deps:
	@command -v redis-server >/dev/null 2>&1 || { \
		echo "installing redis-server"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq redis-server >/dev/null; }
	@command -v redis-server >/dev/null 2>&1 || { \
		echo "redis-server is required: install it (e.g. apt-get install redis-server)"; exit 1; }

$(STAMP): pyproject.toml setup.py
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)" 2>&1 | grep -v "is ignored: it is neither" || true
	$(BIN)/python -m pip install -q -e ".[dev]" 2>&1 | grep -v "is ignored: it is neither" || true
	$(BIN)/python -c "import torch, transformers, widebeam.services.decoder"
	@touch $@

lint: install
	$(BIN)/ruff check .

test: install lint
	$(BIN)/python -m pytest -q

# DEMO_ONCE=1: exit after the examples instead of serving until Ctrl-C; DEMO_TINY=1: the
# seconds-long toy recommender instead of the real demo one (what the suite's test runs).
demo: install
	DEMO_ONCE=$(DEMO_ONCE) DEMO_TINY=$(DEMO_TINY) $(BIN)/python -m widebeam.showcase

clean:
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache
