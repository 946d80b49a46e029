#!/usr/bin/env bash
# GPU smoke run: CartPole PPO (configs/cartpole_ppo.toml) to 475 with the learner
# on the CPU and then on a GPU of its own (resources.learner.gpu = 1,
# training.device = "cuda"), then on the GPU with training.amp = "bf16", one after
# the other; prints each run's end, the learner's updates per second, and the
# ratios to the CPU run. Where torch sees no GPU it says
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

run() {  # $1: cpu or cuda; $2: training.amp (none or bf16)
  local dev=$1 amp=${2:-none} gpu=0 name=$1
  [ "$dev" = cuda ] && gpu=1
  [ "$amp" = none ] || name="$dev-$amp"
  "$PY" -m launcher.cli configs/hosts.local.txt configs/cartpole_ppo.toml \
    --run-dir "$tmp/$name" --set "training.device=\"$dev\"" --set "resources.learner.gpu=$gpu" \
    --set "training.amp=\"$amp\"" --set evaluation.stop_at_return=475 > "$tmp/$name.out" 2>&1 || true
  tail -1 "$tmp/$name.out"
  "$PY" - "$tmp/$name" "$name" <<'EOF'
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
run cuda bf16
"$PY" -c "import sys; c, g, b = (float(open(f).read()) for f in sys.argv[1:]); \
print(f'updates/s, GPU over CPU: {g / c:.2f}; GPU with bf16 over CPU: {b / c:.2f}')" \
  "$tmp/cpu/rate" "$tmp/cuda/rate" "$tmp/cuda-bf16/rate"
