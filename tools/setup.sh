#!/usr/bin/env bash
# Create .venv in the checkout (once) and install verl-zmq with the extras the
# tests exercise (test, tensorboard, onnx, plot, dashboard, llm, tracking,
# serve, tune, ray); EXTRAS overrides.
# torch is pinned to the CPU build that pip finds for this machine kind.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
if ! python -c "import torch" 2>/dev/null; then
  python -m pip install -q --upgrade pip
  python -m pip install -q "torch==2.13.0"
fi
python -m pip install -q -e ".[${EXTRAS:-test,tensorboard,onnx,plot,dashboard,llm,tracking,serve,tune,ray}]"
