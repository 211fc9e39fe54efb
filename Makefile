# FlashAttention in Triton — common tasks. `make` alone lists them.
# Every target installs what it needs into .venv on a fresh machine (make setup).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export PYTHONPATH := $(CURDIR)
# nbgrader calls `alembic` and jupyter from PATH
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
JOBS ?= 1
PYTEST_ARGS ?=
# A machine without a package index (the H200 image) runs the targets with its own python: make … PY=python3
NEEDS_SETUP := $(if $(filter $(VENV)/bin/python,$(PY)),setup,)
# make test-gpu: pytest workers beside each other (each grades with up to 4 GPU worker processes), and JUnit files
GPU_TEST_JOBS ?= 12
JUNIT ?= test_gpu$(if $(PART),_part$(firstword $(subst /, ,$(PART))),)
# tests run in parallel: each one mostly waits on its own grading worker processes
TEST_JOBS ?= $(shell nproc 2>/dev/null || echo 2)

# the instructor's course folder: nbgrader's config, sources, releases, submissions and gradebook
COURSE ?= grader
# TORCH=system (a GPU machine): a venv that sees the machine's own CUDA torch and Triton instead of the pinned CPU build
TORCH ?= pinned

.DEFAULT_GOAL := help
.PHONY: help setup sandbox build solutions compat demo release autograde feedback export check test test-gpu bench bench-decode seeds mutant-seeds mutation-score class-scale clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(VENV)/.installed: requirements.txt requirements-lock.txt pyproject.toml
ifeq ($(TORCH),system)
	$(PYTHON) -m venv --system-site-packages $(VENV)
	$(PY) -c "import torch, triton; print('using this machine\'s torch', torch.__version__, 'and triton', triton.__version__)"
	grep -v -E '^(torch|triton)==' requirements.txt > $(VENV)/requirements-system-torch.txt
	$(PY) -m pip install -q -r $(VENV)/requirements-system-torch.txt
else
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt -c requirements-lock.txt
endif
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3" >/dev/null
	touch $@

setup: $(VENV)/.installed ## .venv: pinned CPU torch, triton, nbgrader, jupyter, and the grader (TORCH=system on a GPU machine)

sandbox: ## make sure bubblewrap (bwrap) is here: student code is graded inside it (grader/README.md)
	@if command -v bwrap >/dev/null; then echo "bubblewrap: $$(bwrap --version)"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get install -y -q bubblewrap >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q bubblewrap >/dev/null; }; \
	else echo "bubblewrap is missing: ask your administrator for the package 'bubblewrap' (apt, dnf, pacman all have it);"; \
	  echo "without it grading still runs, but says in every check that submissions could read the course's files"; fi

build: setup ## regenerate course/ and solutions/ from grader/source/
	$(PY) -m grader build

solutions: $(NEEDS_SETUP) ## run each solutions notebook and record its outputs (on a GPU when there is one; LESSON=, LANGUAGE=en|zh)
	$(PY) -m grader run-solutions $(if $(LESSON),--lesson $(LESSON),) $(if $(LANGUAGE),--language $(LANGUAGE),)

demo: setup ## release, then autograde 3 sample submissions per lesson with real nbgrader; prints a score table
	$(PY) -m grader demo

release: setup ## nbgrader generate_assignment into grader/release/ (LESSON=… for one lesson, else all)
	$(PY) -m grader release $(LESSON) --course $(COURSE)

autograde: setup ## grade LESSON's new and changed submissions in grader/submitted/ (JOBS=N in parallel, FORCE=1 all)
	@test -n "$(LESSON)" || { echo "usage: make autograde LESSON=00_setup [JOBS=N] [FORCE=1]"; exit 2; }
	$(PY) -m grader autograde $(LESSON) --course $(COURSE) --jobs $(JOBS) $(if $(FORCE),--force,)

feedback: setup ## an HTML feedback page per student: grader/feedback/<student>/LESSON/LESSON.html
	@test -n "$(LESSON)" || { echo "usage: make feedback LESSON=00_setup"; exit 2; }
	$(PY) -m grader feedback $(LESSON) --course $(COURSE)

export: setup ## grader/grades.csv: a row per student, each lesson's score, mode and status, each check's points
	$(PY) -m grader export --course $(COURSE) --out $(COURSE)/grades.csv

check: setup ## grade one notebook without a gradebook: make check LESSON=… NOTEBOOK=… [MODE=gpu|interpreter|structure]
	@test -n "$(LESSON)" -a -n "$(NOTEBOOK)" || { echo "usage: make check LESSON=00_setup NOTEBOOK=path.ipynb [MODE=…]"; exit 2; }
	$(PY) -m grader check $(LESSON) $(NOTEBOOK) --mode $(or $(MODE),auto)

test: setup ## the whole suite (CPU: interpreter + structure modes); what CI runs
	$(PY) -m pytest -q -n $(TEST_JOBS) --dist worksteal --durations=15 $(PYTEST_ARGS)

test-gpu: $(NEEDS_SETUP) ## the suite in GPU mode (needs a CUDA GPU): tests/gpu_suite.sh; PART=1/4 runs a quarter
	PY=$(PY) PART=$(PART) JUNIT=$(JUNIT) GPU_TEST_JOBS=$(GPU_TEST_JOBS) PYTEST_ARGS="$(PYTEST_ARGS)" bash tests/gpu_suite.sh

bench: $(NEEDS_SETUP) ## benchmarks: TFLOP/s against N for every implementation (needs a CUDA GPU)
	$(PY) -m benchmarks.bench

bench-decode: $(NEEDS_SETUP) ## lesson 06: GB/s of a decode step over COURSE_SPEC §7's grid, beside SDPA and a read probe (GPU)
	$(PY) -m benchmarks.bench_decode --out $(or $(OUT),benchmarks/h200/decode)

seeds: setup ## every check of every reference solution 20 times with fresh seeds (MODE=interpreter|structure|gpu)
	$(PY) tests/fresh_seeds.py --mode $(or $(MODE),interpreter) --repeat 20 --jobs $(TEST_JOBS) \
	  --out tests/reports/fresh_seeds_$(or $(MODE),interpreter).txt

mutant-seeds: setup ## every check of every wrong submission 8 times: a verdict that changes with the seed is a lottery
	$(PY) tests/fresh_seeds.py --mutants --mode $(or $(MODE),interpreter) --repeat 8 --jobs $(TEST_JOBS) \
	  --out tests/reports/mutant_seeds_$(or $(MODE),interpreter).txt

mutation-score: $(NEEDS_SETUP) ## one-token mutants of every reference solution graded like submissions (hours; MODE=gpu ONLY_IDS=file)
	$(PY) tests/mutation.py --mode $(or $(MODE),interpreter) --jobs $(TEST_JOBS) $(if $(ONLY_IDS),--only-ids $(ONLY_IDS)) \
	  --out tests/reports/mutation_$(or $(MODE),interpreter).txt \
	  --survivors-out tests/reports/mutation_$(or $(MODE),interpreter)_survivors.txt

class-scale: setup ## autograde a sample class (31 submissions, all lessons) with real nbgrader; checks every grade
	$(PY) tests/class_scale.py --out demo/class --parallel $(TEST_JOBS)

compat: setup ## the course on Triton 3.4-3.9 (interpreter): notebooks run, references at full marks, AOT compile
	$(PY) tests/compat.py --out tests/reports/compat.txt $(if $(VERSIONS),--versions $(VERSIONS),)

clean: ## remove nbgrader's working folders, the gradebook and caches (keeps .venv)
	rm -rf grader/release grader/submitted grader/autograded grader/feedback grader/gradebook.db grader/.shards \
	  grader/grades.csv demo .pytest_cache
