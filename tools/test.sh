#!/usr/bin/env bash
# Set up (tools/setup.sh), lint, and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
. .venv/bin/activate
ruff check .
python -m pytest -q "$@"
