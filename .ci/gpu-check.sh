#!/usr/bin/env bash
# The whole course on a CUDA GPU, in one go: unit tests (solutions checked on the GPU),
# every lesson notebook solved and executed at full size, then `make bench`'s timings.
# Usage: PYTHON=python3 bash .ci/gpu-check.sh [results folder]
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
out=${1:-build/gpu-check}
mkdir -p "$out" build/solved
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

$PYTHON -c "import helpers; print(helpers.describe())" | tee "$out/log.txt"
$PYTHON -m pytest tests -m "not notebooks" -o addopts= -q -p no:cacheprovider -x 2>&1 | tail -15 | tee -a "$out/log.txt"
$PYTHON -c "from helpers.notebooks import lesson_notebooks, solved_copy
for p in lesson_notebooks(): solved_copy(p, 'build/solved')"
$PYTHON -m pytest --nbval-lax --nbval-cell-timeout=300 -o addopts= -q -p no:cacheprovider \
    build/solved/*.ipynb 2>&1 | tail -25 | tee -a "$out/log.txt"
$PYTHON -m helpers.bench 2>&1 | tee -a "$out/log.txt"
