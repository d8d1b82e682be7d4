# The two commands of README.md: `make reproduce` (set up, then run the study) and `make test`.
# Both create .venv and install the project on first use; nothing else needs installing by hand.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Overlay params files for the main job, e.g. CONFIGS="config/cifar10-jpeg.yaml" (chosen with `gpuscale use`)
CONFIGS ?=
CORES ?= 4
# Which torch build: default = PyPI's (CUDA 13 on Linux x86_64, hash-checked from the lock); cpu = CPU wheels
# (saves about 5 GB), or a CUDA flavour of the PyTorch index (cu126, cu128, cu130: match your driver).
TORCH ?= default
TORCH_INDEX ?= https://download.pytorch.org/whl/$(TORCH)
LOCK := requirements/lock.txt

.PHONY: install reproduce quick test check browser slurm clean-results lock lint timm

install: $(VENV)/.installed

# Every path reaches the shell quoted ($(call q,...)); `gpuscale use` validates the overlays first (one line, file and line).
q = '$(subst ','\'',$(1))'
OVERLAYS = $(foreach f,$(CONFIGS),$(call q,$(f)))

# The full environment from the lock (requirements/lock.txt, every file hash-checked), then the project itself.
$(VENV)/.installed: pyproject.toml $(LOCK)
	@$(PYTHON) requirements/lock.py advise $(TORCH)
	@$(PYTHON) requirements/lock.py check || { echo "the lock disagrees with pyproject.toml: run make lock"; exit 1; }
	$(PYTHON) -m venv $(call q,$(VENV))
	$(call q,$(BIN)/pip) install -q --upgrade pip
ifeq ($(TORCH),default)
	$(call q,$(BIN)/pip) install -q --require-hashes -r $(LOCK)
else
	$(call q,$(BIN)/pip) install -q torch==2.14.1+$(TORCH) torchvision==0.29.1+$(TORCH) --index-url $(TORCH_INDEX)
	$(PYTHON) requirements/lock.py without-torch $(LOCK) > $(call q,$(VENV)/lock-without-torch.txt)
	$(call q,$(BIN)/pip) install -q --require-hashes -r $(call q,$(VENV)/lock-without-torch.txt)
endif
	$(call q,$(BIN)/pip) install -q --no-deps -e .
	touch $(call q,$@)

# Optional: timm, for `timm:<name>` model specs (requirements/timm.txt; torch and torchvision stay as locked).
timm: install
	$(call q,$(BIN)/pip) install -q --require-hashes --no-deps -r requirements/timm.txt

# Refresh requirements/*.txt after an edit to pyproject.toml's dependencies (uv resolves from PyPI in seconds).
lock:
	test -x .venv-tools/bin/uv || { $(PYTHON) -m venv .venv-tools && .venv-tools/bin/pip install -q uv; }
	$(PYTHON) requirements/lock.py compile .venv-tools/bin/uv

# The code style the project keeps (pyproject.toml's [tool.ruff]) and its layers (pyproject.toml's
# [tool.importlinter]: docs/architecture.md); part of `make test` and so of CI.
lint: install
	$(call q,$(BIN)/ruff) check src tests benchmarks research requirements
	$(call q,$(BIN)/ruff) format --check src tests benchmarks research requirements
	$(call q,$(BIN)/lint-imports) --no-cache

# Both choose the overlays first (`gpuscale use`: kept in .gpuscale/, so plain `snakemake` and `dvc repro` then run the
# same study): reproduce the study of params.yaml (with CONFIGS on top), quick the quick preset (with CONFIGS on top).
reproduce: install
	source $(call q,$(BIN)/activate) && gpuscale use $(if $(strip $(CONFIGS)),$(OVERLAYS),--none) \
	  && snakemake --cores $(call q,$(CORES))

quick: install
	source $(call q,$(BIN)/activate) && gpuscale use config/quick.yaml $(OVERLAYS) \
	  && snakemake --cores $(call q,$(CORES))

# Two pytest-xdist workers (one a core here); tests sharing a module's or the session's fixture keep to one worker
# (tests/conftest.py). TEST_WORKERS=0 runs them in this process.
TEST_WORKERS ?= 2
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup)

test: install browser slurm
	source $(call q,$(BIN)/activate) && pytest -q $(XDIST) $(PYTEST_ARGS)
	$(MAKE) --no-print-directory lint

# Before each commit: lint, the import contracts, and the unit tests (no e2e, heavy or slow ones), in about a minute.
check: install
	$(MAKE) --no-print-directory lint
	source $(call q,$(BIN)/activate) && pytest -q $(XDIST) -m 'not e2e and not heavy and not slow' $(PYTEST_ARGS)

# The report is tested in Debian's Chromium (driven by playwright, which downloads no browser).
browser:
	@command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	  || echo "chromium could not be installed: the browser test will be skipped"

# The SLURM test starts a real one-node cluster from Debian's packages (skipped, saying why, where they are missing).
slurm:
	@command -v slurmctld >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmctld slurmd slurm-client >/dev/null) \
	  || echo "slurm could not be installed: the SLURM test will be skipped"

clean-results:
	rm -rf results logs reports/*.html data/prepared .snakemake
