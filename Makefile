# gpuhealth: `make demo` runs it on a simulated fleet, `make test` checks everything.
# Both set up .venv from scratch; `make test` also installs the Debian packages the
# integration tests need (prometheus, prometheus-alertmanager, postgresql, slurmctld,
# slurmd, slurm-client, munge) when root.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
DEMO_LISTEN ?= 127.0.0.1:8080

.PHONY: help venv system-deps lint typecheck test test-unit test-integration demo generate images bench model cross-domain independent clean

help:
	@echo "make demo      run gpuhealth on a simulated fleet and print where to look"
	@echo "make test      set everything up, lint, type-check and run all tests"
	@echo "make generate  regenerate docs/metrics.md, docs/configuration.md, docs/downtime.md's table, alert rules, dashboards, their docs and deploy/kubernetes/"
	@echo "make images    build the collector and service images with podman (ENGINE=docker for docker)"
	@echo "make bench     run the benchmarks (ratios against in-process baselines)"
	@echo "make model     rebuild the shipped model from domain-randomised simulated fleets"
	@echo "make cross-domain  the leave-one-family-out evaluation of docs/model.md"
	@echo "make independent   the model on fleets of a generator written apart from simulator/"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $@

venv: $(STAMP)

system-deps:
	@bash scripts/install-system-deps.sh

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy
	$(BIN)/mypy scripts/independent_fleet.py

generate: $(STAMP)
	$(BIN)/gpuhealth docs metrics
	$(BIN)/gpuhealth docs settings
	$(BIN)/gpuhealth docs downtime
	$(BIN)/gpuhealth alerts build
	$(BIN)/gpuhealth dashboards build
	$(BIN)/gpuhealth deploy build
	$(BIN)/python -m collector.podresources.generate

test: $(STAMP) system-deps lint typecheck
	$(BIN)/gpuhealth docs metrics --check
	$(BIN)/gpuhealth docs settings --check
	$(BIN)/gpuhealth docs downtime --check
	$(BIN)/gpuhealth alerts build --check
	$(BIN)/gpuhealth dashboards build --check
	$(BIN)/gpuhealth deploy build --check
	$(BIN)/python -m pytest

test-unit: $(STAMP)
	$(BIN)/python -m pytest -m 'not integration and not gpu'

demo: $(STAMP)
	$(BIN)/gpuhealth demo --listen $(DEMO_LISTEN)

# The Containerfile's two targets, named as deploy/kubernetes/ names them (manifests/config.py).
# BASE=... builds on another base image (docs/deploy.md#container-images).
ENGINE ?= podman
IMAGE_NAME = $$($(BIN)/python -c 'from manifests.config import $(1); print($(1))')
images: $(STAMP)
	$(ENGINE) build --target collector $(if $(BASE),--build-arg BASE=$(BASE)) -t $(call IMAGE_NAME,COLLECTOR_IMAGE) .
	$(ENGINE) build --target service $(if $(BASE),--build-arg BASE=$(BASE)) -t $(call IMAGE_NAME,IMAGE) .

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_exporter.py
	$(BIN)/python benchmarks/bench_simulate.py
	$(BIN)/python benchmarks/bench_score.py
	$(BIN)/python benchmarks/bench_ingest.py
	$(BIN)/python benchmarks/bench_api.py
	$(BIN)/python benchmarks/bench_pull.py
	$(BIN)/python benchmarks/bench_actuate.py

# The shipped model: trained on domain-randomised simulated fleets of the four families in
# simulator/families.py (2 fleets each, seeds 100 and 101, 256 GPUs x 90 days); evaluation
# uses other seeds (7, 11, 900-906, 913, 914, 917-920) and the family no model trains on ("unseen").
# Each head is the mean of two trained with seeds of their own (predictor.model.MEMBERS). docs/model.md.
model: $(STAMP)
	$(BIN)/gpuhealth train --families all --fleets-per-family 2 --every 6h --out predictor/models/default.skops

# The leave-one-family-out table of docs/model.md (over an hour on 2 cores).
cross-domain: $(STAMP)
	$(BIN)/gpuhealth evaluate --cross-domain --out build/cross-domain

# The shipped model on fleets from a generator written apart from simulator/ (about 2 minutes a seed).
INDEPENDENT_SEEDS ?= 1 2 3
independent: $(STAMP)
	@for s in $(INDEPENDENT_SEEDS); do \
		$(BIN)/python scripts/independent_fleet.py --seed $$s --out build/independent && \
		$(BIN)/gpuhealth evaluate --history build/independent/fleet-$$s.parquet \
			--failures build/independent/failures-$$s.csv --out build/independent/eval-$$s || exit 1; \
	done

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
