#!/usr/bin/env bash
# The grading contract on a CUDA GPU: unit tests (the mutation suite included: every wrong answer
# rejected, every right one accepted, guard bands catching stray writes; tests/test_worker.py's kernels
# that crash the GPU context, each reported on its own case with a correct check passing after it in
# the same process) and every lesson notebook, solved, executed at full size with nothing on stderr
# (tests/test_gpu_notebooks.py; the executed notebooks land in build/executed/).
# On a host of several GPUs the unit tests' workers are spread over them (tests/conftest.py): compiling
# kernels is most of the run, and such a host has that many more cores.
# Usage: PYTHON=python3 bash .ci/gpu-grading.sh [results folder] [workers, default 10 per GPU]
#        [parts, default "unit notebooks": either one alone runs only that half]
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
out=${1:-build/gpu-grading}
# The whole log is written as it runs (unit.log, notebooks.log), the last lines shown.
# the GPUs this run may use: CUDA_VISIBLE_DEVICES's, if it names some, else every one nvidia-smi lists
if [[ -n "${CUDA_VISIBLE_DEVICES:-}" ]]; then
  COURSE_GPUS=$(tr ',' '\n' <<< "$CUDA_VISIBLE_DEVICES" | grep -c .)
else
  COURSE_GPUS=$(nvidia-smi -L | grep -c "^GPU")
fi
export COURSE_GPUS
workers=${2:-$((10 * COURSE_GPUS))}
parts=${3:-unit notebooks}
mkdir -p "$out"
export COURSE_LARGE_CASE_WAIT_S=300 PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

$PYTHON -c "import helpers; print(helpers.describe())" | tee "$out/describe.txt"
if [[ " $parts " == *" unit "* ]]; then
  $PYTHON -m pytest tests -m "not notebooks" -o addopts= -q -p no:cacheprovider -p no:logging \
      -n "$workers" --dist load -rfE --durations=25 2>&1 | grep --line-buffered -v Warning > "$out/unit.log"
  tail -70 "$out/unit.log" | tee "$out/unit.txt"
fi
if [[ " $parts " == *" notebooks "* ]]; then
  $PYTHON -m pytest tests/test_gpu_notebooks.py -o addopts= -q -p no:cacheprovider -rfE \
      -n $((6 * COURSE_GPUS)) --dist load 2>&1 | grep --line-buffered -v Warning > "$out/notebooks.log"
  tail -60 "$out/notebooks.log" | tee "$out/notebooks.txt"
fi
