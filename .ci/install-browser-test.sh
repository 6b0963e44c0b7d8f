#!/usr/bin/env bash
# Installs what the end-to-end browser test (tests/test_browser.py) needs:
# Debian's chromium (when we are root and it is missing) and Playwright's Python
# package in .venv, which drives that chromium through its executable path.
# Playwright's own browser download (`playwright install`) is never used.

set -euo pipefail
cd "$(dirname "$0")/.."
VENV_PY=${VENV_PY:-.venv/bin/python}

have_chromium() { command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ]; }

if ! have_chromium; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "==> Installing Debian's chromium"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
  else
    echo "==> chromium is missing and this is not root with apt-get: the browser test will be skipped."
    echo "    Install it with your package manager (Debian: sudo apt-get install chromium)."
  fi
fi

if [ ! -x "$VENV_PY" ]; then
  echo "==> $VENV_PY not found: run 'make install' first" >&2
  exit 1
fi
if ! "$VENV_PY" -c "import playwright" >/dev/null 2>&1; then
  echo "==> Installing Playwright's Python package into .venv (no browser download)"
  "$VENV_PY" -m pip install --quiet "playwright>=1.45"
fi

if have_chromium; then
  echo "==> Browser test ready: $(chromium --version 2>/dev/null || echo /usr/bin/chromium)"
fi
