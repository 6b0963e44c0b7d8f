#!/usr/bin/env bash
# Installs what the end-to-end browser test (tests/test_browser.py) needs:
# Debian's chromium (when we are root and it is missing) and Playwright's Python
# package in .venv, which drives that chromium through its executable path.
# Playwright's own browser download (`playwright install`) is never used.
# Outside CI a failed install only warns (the browser test then skips, saying why);
# in CI (CI set) it fails, so the end-to-end test cannot quietly go missing.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV_PY=${VENV_PY:-.venv/bin/python}

give_up() {
  echo "==> $1" >&2
  if [ -n "${CI:-}" ]; then exit 1; fi
  echo "    The browser test will be skipped." >&2
  exit 0
}

have_chromium() { command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ]; }

if [ ! -x "$VENV_PY" ]; then
  echo "==> $VENV_PY not found: run 'make install' first" >&2
  exit 1
fi

if ! have_chromium; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "==> Installing Debian's chromium (a few minutes)"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null; } \
      || give_up "apt-get could not install chromium."
  else
    give_up "chromium is missing and this is not root with apt-get: install it (Debian: sudo apt-get install chromium)."
  fi
fi

if ! "$VENV_PY" -c "import playwright.sync_api" >/dev/null 2>&1; then
  echo "==> Installing Playwright's Python package into .venv (it drives the system chromium; no browser download)"
  "$VENV_PY" -m pip install --quiet "playwright>=1.45" || give_up "pip could not install playwright."
fi

echo "==> Browser test ready: $(chromium --version 2>/dev/null || echo /usr/bin/chromium), playwright $("$VENV_PY" -c 'import importlib.metadata as m; print(m.version("playwright"))')"
