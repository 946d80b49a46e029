#!/usr/bin/env bash
# GPU smoke run: CartPole PPO (configs/cartpole_ppo.toml) to 475 with the learner
# on the CPU and then on a GPU of its own (resources.learner.gpu = 1,
# training.device = "cuda"), one after the other; prints each run's end and the
# learner's updates per second, and their ratio. Where torch sees no GPU it says
# so and exits 0. The pinned torch is a CPU build: on a GPU machine install a
# CUDA build of the same version into .venv first.
#
#   bash tools/gpu_smoke.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3

if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "gpu_smoke: torch sees no GPU on this machine; nothing to run"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run() {  # $1: cpu or cuda
  local dev=$1 gpu=0
  [ "$dev" = cuda ] && gpu=1
  "$PY" -m launcher.cli configs/hosts.local.txt configs/cartpole_ppo.toml \
    --run-dir "$tmp/$dev" --set "training.device=\"$dev\"" --set "resources.learner.gpu=$gpu" \
    --set evaluation.stop_at_return=475 > "$tmp/$dev.out" 2>&1 || true
  tail -1 "$tmp/$dev.out"
  "$PY" - "$tmp/$dev" "$dev" <<'EOF'
import json
import pathlib
import sys

run, dev = pathlib.Path(sys.argv[1]), sys.argv[2]
ev = [json.loads(line) for line in (run / "logs" / "learner-0.jsonl").read_text().splitlines()
      if line.startswith("{")]
first = next(e for e in ev if e.get("event") == "first_update")
last = [e for e in ev if e.get("event") == "metrics"][-1]
rate = (last["learner/updates"] - 1) / max(1e-9, last["ts"] - first["ts"])
(run / "rate").write_text(f"{rate}")
print(f"{dev}: {rate:.2f} updates/s")
EOF
}

run cpu
run cuda
"$PY" -c "import sys; c, g = (float(open(f).read()) for f in sys.argv[1:]); \
print(f'updates/s, GPU over CPU: {g / c:.2f}')" "$tmp/cpu/rate" "$tmp/cuda/rate"
