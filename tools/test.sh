#!/usr/bin/env bash
# Set up (tools/setup.sh), lint, type-check, and run the whole test suite.
# Arguments go to pytest: `bash tools/test.sh -m "not e2e"` is the fast lane.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
# the SSH launcher tests run a real sshd on loopback aliases: install it where we can
if ! command -v sshd >/dev/null && [ ! -x /usr/sbin/sshd ] && [ "$(id -u)" = 0 ] \
    && command -v apt-get >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends openssh-server openssh-client >/dev/null
fi
. .venv/bin/activate
ruff check .
mypy  # strict on the joints ([tool.mypy] in pyproject.toml)
python -m pytest -q -rs --durations=15 "$@"
