# widebeam — two commands do all set-up: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch is enough for tests and the demo; a CUDA machine can install `.[gpu]`.
TORCH_SPEC ?= torch==2.13.0
RUNTIME_STAMP := $(VENV)/.widebeam-runtime
DEV_STAMP := $(VENV)/.widebeam-dev
PIP := $(BIN)/python -m pip install -q
QUIET_PIP := 2>&1 | grep -v "is ignored: it is neither" || true

.PHONY: install install-dev test lint demo clean system-deps browser-deps compose-test

# Runtime dependencies only: what `make demo` and serving need (no Triton, transformers, ...).
install: $(RUNTIME_STAMP) system-deps

# Runtime plus the dev extras: pytest, ruff, transformers (parity tests), Triton's interpreter.
install-dev: $(DEV_STAMP) system-deps

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

# The playground's browser test drives Debian's chromium through chromedriver (Selenium).
# Installed when missing and apt-get can run (root, or sudo without a password); elsewhere the
# test skips and says why. An install that apt-get refuses fails `make test`, so CI never
# skips the test silently.
BROWSER_PACKAGES := chromium chromium-driver
browser-deps:
	@if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then \
		:; \
	elif ! command -v apt-get >/dev/null 2>&1; then \
		echo "no apt-get: the playground's browser test will skip (needs chromium, chromedriver)"; \
	elif [ "$$(id -u)" != 0 ] && ! sudo -n true 2>/dev/null; then \
		echo "not root: the playground's browser test will skip (apt-get install $(BROWSER_PACKAGES))"; \
	else \
		echo "installing $(BROWSER_PACKAGES)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends \
			$(BROWSER_PACKAGES) >/dev/null; \
	fi

$(RUNTIME_STAMP): pyproject.toml setup.py
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) "$(TORCH_SPEC)" $(QUIET_PIP)
	$(PIP) -e . $(QUIET_PIP)
	$(BIN)/python -c "import torch, widebeam.services.decoder, widebeam.showcase"
	@touch $@

# `make test`'s install, the runtime's too: one pip run for the project and its dev extras (one
# resolution, one editable build), without pip's byte-compiling, which goes through the files
# one at a time (most of torch's install time); compileall then writes the same .pyc files on
# every core. Like pip, it leaves the few files that are not Python 3.11 (torch's tests of newer
# syntax) uncompiled; it exits 1 for them, hence the `|| true`: the imports check the install.
$(DEV_STAMP): pyproject.toml setup.py
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) --no-compile "$(TORCH_SPEC)" $(QUIET_PIP)
	$(PIP) --no-compile -e ".[dev]" $(QUIET_PIP)
	$(BIN)/python -m compileall -qq -j 0 \
		"$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" || true
	$(BIN)/python -c "import torch, widebeam.services.decoder, widebeam.showcase"
	$(BIN)/python -c "import pytest, transformers"
	@touch $(RUNTIME_STAMP) $@

lint: install-dev
	$(BIN)/ruff check .

# Two pytest-xdist workers, one per core: many tests wait on real processes, restarts and
# timeouts, and the other worker runs meanwhile. --dist loadscope keeps a module's tests (and
# its module-scoped stack or build) on one worker; --no-loadscope-reorder hands out modules in
# collection order, which tests/conftest.py starts with the longest ones (xdist's own order, by
# test count, leaves the long one-test modules for last); each worker runs one torch thread
# (tests/conftest.py). Tests marked `serial` (the load tests, which measure capacity and then
# offer twice that) run afterwards on their own, collected from their own files only (the whole
# suite's collection costs tens of seconds on busy cores).
SERIAL_TESTS = $(shell grep -rlE --include='test_*.py' 'mark\.serial\b' tests)
test: install-dev browser-deps lint
	$(BIN)/python -m pytest -q -n 2 --dist loadscope --no-loadscope-reorder \
		-m "not docker and not serial"
	$(BIN)/python -m pytest -q -m "serial and not docker" $(SERIAL_TESTS)

# `docker compose up` for real: builds the CPU image (deploy/offline/build.sh), runs the Compose
# stack on the tiny demo model and checks it end to end (deploy/README.md, "make compose-test").
# Needs a running Docker daemon with Compose v2 and BuildKit; nothing here starts one, and
# `make test` deselects the `docker` tests (pyproject.toml's addopts).
compose-test: install-dev
	$(BIN)/python -m pytest -q -s -p no:cacheprovider -m docker tests/deploy/test_compose_stack.py \
		tests/deploy/test_cuda_image_layers.py

# DEMO_ONCE=1: exit after the examples instead of serving until Ctrl-C; DEMO_TINY=1: the
# seconds-long toy recommender instead of the real demo one (what the suite's test runs).
demo: install
	DEMO_ONCE=$(DEMO_ONCE) DEMO_TINY=$(DEMO_TINY) $(BIN)/python -m widebeam.showcase

clean:
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache
