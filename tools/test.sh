#!/usr/bin/env bash
# Set up (tools/setup.sh), lint, type-check, and run the whole test suite.
# Arguments go to pytest: `bash tools/test.sh -m "not e2e"` is the fast lane.
set -euo pipefail
cd "$(dirname "$0")/.."
# what the tests run besides Python, installed where this can be done (root with apt):
# sshd and iproute2 (SSH launches and namespace hosts), slurm-wlm and munge (a real
# Slurm cluster on those hosts), procps; without them those tests say what is missing
need=()
command -v sshd >/dev/null || [ -x /usr/sbin/sshd ] || need+=(openssh-server openssh-client)
command -v ip >/dev/null || need+=(iproute2)
command -v slurmctld >/dev/null || [ -x /usr/sbin/slurmctld ] || need+=(slurm-wlm)
command -v munged >/dev/null || [ -x /usr/sbin/munged ] || need+=(munge)
command -v pkill >/dev/null || need+=(procps)
if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing ${need[*]}" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends "${need[@]}" >/dev/null
fi
bash tools/setup.sh
. .venv/bin/activate
ruff check .
mypy  # strict on the joints ([tool.mypy] in pyproject.toml)
# two workers, each test module on one (its fixtures built once): most tests spend
# their time waiting on the processes of a job; TEST_WORKERS=0 runs them in one
python -m pytest -q -rs --durations=15 -n "${TEST_WORKERS:-2}" --dist loadscope "$@"
