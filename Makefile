# The course's commands. `make lab` and `make test` install on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
LESSON ?=

.PHONY: help install lab update test test-oldest-triton install-browser-test grade bench profile review flashcards \
	progress sync lint clean

help:
	@echo "make lab      install (first time), then open your lessons (workspace/) in JupyterLab"
	@echo "make update   bring the course's latest version, keeping your answers in workspace/"
	@echo "make test     install (first time) and run every test (no GPU needed)"
	@echo "make grade    re-run your notebooks (workspace/) and print which exercises pass (LESSON=02 for one)"
	@echo "make bench    time every solution kernel beside its baselines (GPU); without one, print the recorded figures"
	@echo "make profile  record lesson 08's profiles: torch.profiler, Nsight Compute, proton (GPU)"
	@echo "make review   drill the flashcards that are due (LESSON=02 for one lesson)"
	@echo "make progress exercises passed and cards new, due, learning and learned, lesson by lesson"
	@echo "make flashcards  a printable deck in build/flashcards.html (and .pdf), and build/flashcards.apkg for Anki"
	@echo "make sync     rebuild each .ipynb from its paired .py (after editing a .py)"

install: $(STAMP)

$(STAMP): requirements.txt constraints-cpu.txt
	@echo "==> Creating $(VENV) (first run only)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@if nvidia-smi >/dev/null 2>&1; then \
	  echo "==> GPU found: installing PyTorch with CUDA and the Triton it needs (a few GB, several minutes)"; \
	  $(BIN)/python -m pip install --progress-bar on -r requirements.txt; \
	else \
	  echo "==> No GPU: installing the CPU build of PyTorch and the tested pins (about 1 GB, a few minutes)"; \
	  $(BIN)/python -m pip install --progress-bar on -r requirements.txt -c constraints-cpu.txt; \
	fi
	@# make `import helpers` work from the notebooks/ folder and from tests
	$(BIN)/python -c "import sysconfig, pathlib; pathlib.Path(sysconfig.get_paths()['purelib'], 'gpu_kernels_course.pth').write_text('$(CURDIR)\n')"
	@touch $(STAMP)
	@echo "==> Installed. $$($(BIN)/python -c 'import torch, triton; print("torch", torch.__version__, "| triton", triton.__version__, "| GPU:", torch.cuda.is_available())')"

# You work in workspace/ (not tracked): your copies of notebooks/, made when missing, never overwritten.
lab: $(STAMP)
	@$(BIN)/python -m helpers.workspace seed
	$(BIN)/jupyter lab $$([ "$$(id -u)" = 0 ] && echo --allow-root) --notebook-dir=workspace

# git pull --ff-only, then refresh workspace/ from the new notebooks/ keeping your answers
# (helpers/workspace.py); then install again if the requirements changed.
update: $(STAMP)
	@$(BIN)/python -m helpers.workspace update
	@$(MAKE) --no-print-directory install

test: $(STAMP) lint
	$(BIN)/python -m pytest tests

# CI also runs the unit tests and the solved notebooks on the oldest Triton the course supports
# (with the venv's numpy). PYTHONPATH must be absolute: nbval starts each notebook's kernel in
# the notebook's folder, and the kernels must import this Triton too (the tests check, through
# COURSE_EXPECT_TRITON).
OLDEST_TRITON := 3.6.0
OLDEST_ENV    := PYTHONPATH="$(CURDIR)/$(VENV)/oldest-triton" COURSE_EXPECT_TRITON=$(OLDEST_TRITON)
test-oldest-triton: $(STAMP)
	$(BIN)/python -m pip install --quiet --target $(VENV)/oldest-triton --no-deps triton==$(OLDEST_TRITON)
	$(OLDEST_ENV) $(BIN)/python -m pytest tests -m "not notebooks" -q
	$(OLDEST_ENV) $(BIN)/python -m pytest tests/test_notebooks.py::test_solved_notebooks_pass -q

# exit status 0 while exercises are only unfinished; 1 for a wrong answer or a broken cell
grade: $(STAMP)
	@$(BIN)/python -m helpers.grade $(if $(LESSON),--lesson $(LESSON))

bench: $(STAMP)
	$(BIN)/python -m helpers.bench $(if $(LESSON),--lesson $(LESSON)) $(if $(GROUPS),--groups $(GROUPS))

profile: $(STAMP)
	$(BIN)/python -m helpers.profile

review: $(STAMP)
	$(BIN)/python -m helpers.review $(if $(LESSON),--lesson $(LESSON))

flashcards: $(STAMP)
	$(BIN)/python -m helpers.review --print

progress: $(STAMP)
	$(BIN)/python -m helpers.review --progress

# Debian's chromium and Playwright's Python package, for tests/test_browser.py
install-browser-test: $(STAMP)
	bash .ci/install-browser-test.sh

sync: $(STAMP)
	$(BIN)/jupytext --to ipynb --update notebooks/[0-9][0-9]_*.py

lint: $(STAMP)
	$(BIN)/ruff check helpers solutions tests notebooks

clean:
	rm -rf build .pytest_cache .ruff_cache
