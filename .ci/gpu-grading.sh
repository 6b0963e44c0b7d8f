#!/usr/bin/env bash
# The grading contract on a CUDA GPU: unit tests (the mutation suite included: every wrong answer
# rejected, every right one accepted, guard bands catching stray writes) and every lesson notebook,
# solved, executed at full size. Usage: PYTHON=python3 bash .ci/gpu-grading.sh [results folder] [workers]
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
out=${1:-build/gpu-grading}
workers=${2:-8}
mkdir -p "$out" build/solved
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

$PYTHON -c "import helpers; print(helpers.describe())" | tee "$out/describe.txt"
$PYTHON -m pytest tests -m "not notebooks" -o addopts= -q -p no:cacheprovider -p no:logging \
    -n "$workers" --dist loadfile -rfE 2>&1 | grep -v Warning | tail -40 | tee "$out/unit.txt"
$PYTHON -c "from helpers.notebooks import lesson_notebooks, solved_copy
for p in lesson_notebooks(): solved_copy(p, 'build/solved')"
$PYTHON -m pytest --nbval-lax --nbval-cell-timeout=300 -o addopts= -q -p no:cacheprovider -rfE \
    -n 7 --dist loadfile build/solved/*.ipynb 2>&1 | grep -v Warning | tail -40 | tee "$out/notebooks.txt"
