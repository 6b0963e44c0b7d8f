#!/usr/bin/env bash
# The grading contract on a CUDA GPU: unit tests (the mutation suite included: every wrong answer
# rejected, every right one accepted, guard bands catching stray writes; tests/test_worker.py's kernels
# that crash the GPU context, each reported on its own case with a correct check passing after it in
# the same process) and every lesson notebook, solved, executed at full size with nothing on stderr
# (tests/test_gpu_notebooks.py; the executed notebooks land in build/executed/).
# Usage: PYTHON=python3 bash .ci/gpu-grading.sh [results folder] [workers]
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
out=${1:-build/gpu-grading}
workers=${2:-8}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

$PYTHON -c "import helpers; print(helpers.describe())" | tee "$out/describe.txt"
$PYTHON -m pytest tests -m "not notebooks" -o addopts= -q -p no:cacheprovider -p no:logging \
    -n "$workers" --dist loadfile -rfE 2>&1 | grep -v Warning | tail -40 | tee "$out/unit.txt"
$PYTHON -m pytest tests/test_gpu_notebooks.py -o addopts= -q -p no:cacheprovider -rfE \
    -n 6 --dist load 2>&1 | grep -v Warning | tail -60 | tee "$out/notebooks.txt"
