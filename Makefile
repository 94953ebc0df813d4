# The Transformer, step by step. `make book` builds the book (the self-study edition);
# `make class` the class edition; `make test` runs every check; `make release` tags a release.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
STAMP := $(VENV)/.installed
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.ipynb))
JOBS ?= 2
# Each pytest-xdist worker gets one thread, so two workers share two cores without thrashing.
WORKER_ENV := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MPLBACKEND=Agg
LAB_FLAGS := $(if $(filter 0,$(shell id -u)),--allow-root,)
# A stage's commands, then the seconds they took ("make unit: 330 s"), keeping their status.
timed = start=$$(date +%s); ( $(1) ); status=$$?; \
	echo "make $@: $$(( $$(date +%s) - start )) s"; exit $$status

.PHONY: book class test lint unit nbval browser execute lab assignments student release bench sync \
	gpu-carry clean

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

## book: create .venv if needed, install, build the HTML book from the stored outputs: the
## self-study edition (the master notebooks, solutions collapsed) in _build/html
book: $(STAMP)
	$(call timed,$(PY) scripts/course_tables.py && $(BIN)/jupyter-book build . -W -n --keep-going)
	@echo "Book: $(abspath _build/html/index.html)"

## class: the class edition in _build/class/html: the chapters' student copies with their
## results, no solution in the pages, the search index or the downloads (scripts/class_edition.py
## lays out its source in _build/class-src, builds it, then checks every built file for the
## master notebooks' solutions)
class: $(STAMP)
	$(call timed,$(PY) scripts/course_tables.py && \
		$(PY) scripts/class_edition.py build -- -W -n --keep-going)

## test: ruff, nbval over notebooks/, unit tests, the book build with warnings as errors, the
## class edition built and checked for solutions, and the built book read in headless Chromium;
## each stage prints its time. nbval comes before the unit tests: on a machine whose course cache
## is empty, the chapters train chapter 10's model as a reader's first run does (README)
test: lint nbval unit book class browser

## lint: ruff, mypy over the core (pyproject.toml [tool.mypy]), the notebooks' setup cells, no
## copied code (pylint), the floors and their imports (check_structure; sizes over its limits
## are printed as warnings)
lint: $(STAMP)
	$(call timed,$(BIN)/ruff check src tests scripts benchmarks notebooks && $(BIN)/mypy && \
		$(PY) scripts/sync_notebooks.py --check && \
		$(BIN)/pylint --disable=all --enable=duplicate-code src/transformer_book && \
		$(PY) scripts/check_structure.py)

unit: $(STAMP)
	$(call timed,$(WORKER_ENV) $(PY) -m pytest tests -n $(JOBS) -q)

nbval: $(STAMP)
	$(call timed,$(WORKER_ENV) $(PY) -m pytest --nbval notebooks -n $(JOBS) --dist loadscope \
		--nbval-sanitize-with nbval_sanitize.cfg -q -p no:randomly)

## browser: read every page of the built book in headless Chromium (Debian's `chromium`), at
## 1400 and 390 px, light and dark, offline: no overflow, math typeset locally, no raw markup,
## alt texts, caption contrast, no other host, no console error, links; each chapter opens
## on a diagram, its first visible code at most 12 lines, at most ~4,000 words of prose
browser: book
	$(call timed,$(PY) scripts/book_browser.py _build/html)

## execute: re-run every notebook in place to refresh its stored outputs
execute: $(STAMP)
	$(PY) scripts/execute_notebooks.py $(NOTEBOOKS)

## lab: open JupyterLab on the notebooks; LAB_ARGS go to the server, e.g. on a remote
## machine: make lab LAB_ARGS="--no-browser --ip=0.0.0.0 --port=8888"
## (--ServerApp.token=..., --notebook-dir=assignments: any `jupyter lab --help-all` option)
LAB_ARGS ?=
lab: $(STAMP)
	$(BIN)/jupyter lab notebooks $(LAB_FLAGS) $(LAB_ARGS)

## assignments: student notebooks (solutions stripped, outputs cleared) in assignments/
assignments: $(STAMP)
	$(BIN)/transformer-book assignments --source notebooks --out assignments

## student: the student branch's tree in _build/student (STUDENT_ARGS="--commit" makes the
## commit on branch `student` as .github/workflows/student.yml does)
STUDENT_ARGS ?=
student: $(STAMP)
	$(PY) scripts/student_branch.py --out _build/student $(STUDENT_ARGS)

## release: on a clean tree whose notebooks install pyproject.toml's version (`make sync`),
## tag HEAD v<version> and commit the student branch from that tag (scripts/release.py);
## it prints the push that publishes both (.github/workflows/release.yml does the rest)
release: $(STAMP)
	$(PY) scripts/release.py

## bench: speed ratios against PyTorch's own modules, printed and saved to results/
bench: $(STAMP)
	$(PY) benchmarks/run_all.py --results results

## sync: rewrite every notebook's Colab badge, setup cell and exercise markup (idempotent)
sync: $(STAMP)
	$(PY) scripts/sync_notebooks.py

## gpu-carry: .gpu_run/, what scripts/gpu_run.py needs on a copied tree (CONTRIBUTING.md)
MULTI30K ?= $(or $(TRANSFORMER_BOOK_DATA),../shared/data/multi30k)
gpu-carry:
	mkdir -p .gpu_run/multi30k
	cp $(MULTI30K)/*.gz $(MULTI30K)/SHA256SUMS .gpu_run/multi30k/
	git rev-parse HEAD > .gpu_run/commit

clean:
	rm -rf _build assignments book/figures/generated
