# The two commands of README.md: `make reproduce` (set up, then run the study) and `make test`.
# Both create .venv and install the project on first use; nothing else needs installing by hand.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Overlay params files for the main job, e.g. CONFIGS="config/quick.yaml config/cifar10-jpeg.yaml"
CONFIGS ?=
CORES ?= 4

.PHONY: install reproduce quick test browser slurm clean-results

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(call q,$(VENV))
	$(call q,$(BIN)/pip) install -q --upgrade pip
	$(call q,$(BIN)/pip) install -q -e '.[test]'
	touch $(call q,$@)

# Every path reaches the shell quoted ($(call q,...)); the overlays are validated first (one line, file and line).
q = '$(subst ','\'',$(1))'
OVERLAYS = $(foreach f,$(CONFIGS),$(call q,$(f)))

reproduce: install
	source $(call q,$(BIN)/activate) && gpuscale validate --params params.yaml $(foreach f,$(OVERLAYS),--params $(f)) \
	  && snakemake --cores $(call q,$(CORES)) $(if $(strip $(CONFIGS)),--configfile $(OVERLAYS))

quick: install
	source $(call q,$(BIN)/activate) && gpuscale validate --params params.yaml --params config/quick.yaml $(foreach f,$(OVERLAYS),--params $(f)) \
	  && snakemake --cores $(call q,$(CORES)) --configfile config/quick.yaml $(OVERLAYS)

test: install browser slurm
	source $(call q,$(BIN)/activate) && pytest -q $(PYTEST_ARGS)

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
