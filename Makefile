# dlaas: `make demo` runs the example job on the embedded platform; `make test` runs the tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of PyTorch; other torch specs pull multi-GB CUDA wheels.
TORCH ?= torch==2.13.0
STAMP := $(VENV)/.dlaas-installed

.PHONY: install demo down test lint bench clean e2e-kind vendor

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet "$(TORCH)" numpy
	# the train extra after the CPU torch: torch is then already satisfied, and scikit-learn
	# (which the cascade SVM example and its tests need) is added
	$(BIN)/pip install --quiet -e ".[dev,train]"
	touch $@

demo: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" bash examples/digits/demo.sh

down: $(STAMP)
	$(BIN)/dlaas down

lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# Two test processes (pytest-xdist): most of the end-to-end, chaos and browser tests' time is
# spent waiting on real jobs, which the other process fills with tests of its own. Each
# module's tests stay in one process, in order; --no-loadscope-reorder hands modules out in
# collection order, so the long platform modules (browser, chaos, e2e) start first and each
# process meets a package's platform once.
TEST_WORKERS ?= 2

test: $(STAMP) lint
	$(BIN)/pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

bench: $(STAMP)
	$(BIN)/python -m bench.latency
	$(BIN)/python -m bench.api_load
	$(BIN)/python -m bench.recovery
	$(BIN)/python -m bench.k8s_control
	$(BIN)/python -m bench.soak
	$(BIN)/python -m bench.checkpoint_stall
	$(BIN)/python -m bench.log_flood
	$(BIN)/python -m bench.fuzz
	$(BIN)/python -m bench.dashboard
	$(BIN)/python -m bench.isolation
	$(BIN)/python -m bench.redis_isolation
	$(BIN)/python -m bench.token_auth
	$(BIN)/python -m bench.scheduler
	$(BIN)/python -m bench.sched_sim

# The dashboard's front-end libraries (and the browser tests' axe-core) fetched again from npm
# at the versions their vendor.json pins; refuses, writing nothing, if any file's sha256 differs.
vendor: $(STAMP)
	$(BIN)/python -m api.dashboard.vendor

# A kind cluster with dlaas installed from the chart, then tests/e2e_kind (needs Docker, kind
# and kubectl; see README "Kubernetes").
e2e-kind: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" PYTHON="$(abspath $(BIN))/python" bash tests/e2e_kind/run.sh

clean:
	rm -rf $(VENV) build *.egg-info
