# gradfuse: `make demo` runs the examples, `make test` runs every test.
# Both create .venv and install the project on first use.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-unit test-filecheck test-slow test-portable test-gpu fuzz lint install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	@for f in examples/*.tg; do \
		echo "== ir-run $$f"; \
		inputs=$${f%.tg}.npz; \
		if [ -f "$$inputs" ]; then $(BIN)/ir-run $$f --inputs $$inputs --outputs /tmp/gradfuse-demo-out.npz || exit 1; \
		else $(BIN)/ir-run $$f --outputs /tmp/gradfuse-demo-out.npz || exit 1; fi; \
	done
	@for f in examples/mlp.py examples/transformer.py examples/sequence.py; do \
		echo "== python $$f"; $(BIN)/python $$f || exit 1; \
	done

test: lint test-filecheck test-unit test-portable

# The unit tests on every core (pytest-xdist; each test file stays on one worker, so
# that its module fixtures are built once): `make test` stays under 10 minutes on 2.
JOBS ?= auto
XDIST = -n $(JOBS) --maxprocesses 8 --dist loadfile

test-unit: $(STAMP)
	$(BIN)/python -m pytest -q $(XDIST) -m "not slow and not gpu"

# The c backend's numeric tests again, built for a portable x86-64 without FMA: a
# tolerance that holds only with this CPU's vector width or FMA fails here, not in CI.
# The random programs: 4 batches (48 programs) here, the 96 of test-unit with FMA,
# so that `make test` stays under 10 minutes on 2 cores.
PORTABLE_CFLAGS ?= -march=x86-64 -mno-fma
test-portable: $(STAMP)
	GRADFUSE_CFLAGS="$(PORTABLE_CFLAGS)" GRADFUSE_RANDOM_BATCHES=4 $(BIN)/python -m pytest -q $(XDIST) \
		-m "c_numeric and not slow and not gpu"

test-filecheck: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/lit -v tests/filecheck

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

# On a machine with an NVIDIA GPU: installs PyCUDA, runs tests/gpu on the GPU (`make
# test` runs them on the emulated device) and the cases of tests/unit marked `gpu`.
test-gpu: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[cuda]'
	GRADFUSE_GPU_TESTS_ON=cuda $(BIN)/python -m pytest -q tests/gpu
	$(BIN)/python -m pytest -q -m gpu tests/unit

# The mutation fuzzer (tests/fuzz): GRADFUSE_FUZZ_COUNT inputs (10000) from
# GRADFUSE_FUZZ_SEED (0); `make test` runs 300 of them (tests/unit/tools/test_fuzz_tg.py).
fuzz: $(STAMP)
	$(BIN)/python tests/fuzz/harness.py

lint: $(STAMP)
	$(BIN)/ruff check gradfuse tests

clean:
	rm -rf $(VENV) build *.egg-info
