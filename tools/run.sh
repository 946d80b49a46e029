#!/usr/bin/env bash
# Set up (tools/setup.sh) and run the main job: CartPole PPO on this machine.
# Extra arguments go to verl-launch, e.g. --set experiment.seed=1
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
. .venv/bin/activate
exec verl-launch configs/hosts.local.txt configs/cartpole_ppo.toml "$@"
