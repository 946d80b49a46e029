#!/usr/bin/env bash
# The checks of a machine with a GPU and many cores (tools/bench/device_checks.py
# says what each measures), each in a time box, one JSON line per check appended
# to $OUT/checks.jsonl (a check that fails or runs out of time writes a line with
# ok=false and its error); each check's stderr goes to $OUT/log.txt.
#
#   bash tools/gpu_check.sh --cpu                 # the same code at a CPU machine's sizes
#   bash tools/gpu_check.sh                       # on the GPU machine
#   bash tools/gpu_check.sh --only tests,cartpole # some of them
#
# Where the dependencies are missing (a machine without a package index), they
# are installed from wheels in .whl/ first (pyzmq, gymnasium, Farama-Notifications, structlog,
# ale-py, Box2D, stable-baselines3 for its Python), into $TMPDIR/verl-site.
set -uo pipefail
cd "$(dirname "$0")/.."
CPU=0
ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu) CPU=1 ;;
    --only) ONLY=",$2,"; shift ;;
    *) echo "gpu_check: unknown argument $1 (--cpu, --only a,b)" >&2; exit 2 ;;
  esac
  shift
done
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
if ! "$PY" -c 'import zmq, gymnasium, structlog, ale_py, Box2D, stable_baselines3' 2>/dev/null \
   && ls .whl/*.whl >/dev/null 2>&1; then
  site=${TMPDIR:-/tmp}/verl-site
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" .whl/*.whl || { echo "gpu_check: installing .whl/ failed" >&2; exit 1; }
  export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1
flag=""
[ "$CPU" = 1 ] && flag="--cpu"
echo "gpu_check: results in $OUT/checks.jsonl" >&2

check() {  # $1: name; $2: time box in seconds; the rest: arguments of device_checks.py
  local name=$1 box=$2
  shift 2
  if [ -n "$ONLY" ] && [[ "$ONLY" != *",$name,"* ]]; then return; fi
  local t0=$SECONDS line
  echo "== $name (at most ${box} s)" >> "$OUT/log.txt"
  line=$(timeout -k 10 "$box" "$PY" tools/bench/device_checks.py "$@" $flag --box "$box" \
         2>> "$OUT/log.txt" | tail -1)
  if [ -z "$line" ]; then
    line=$("$PY" -c 'import json, sys; print(json.dumps({"check": sys.argv[1], "ok": False,
      "error": "no result within its time box (%s s) or the check crashed; see log.txt"
      % sys.argv[2]}))' "$name" "$box")
  fi
  echo "$line" >> "$OUT/checks.jsonl"
  echo "$name: $(( SECONDS - t0 )) s: ${line:0:300}" >&2
}

if [ "$CPU" = 1 ]; then  # 2 cores, no GPU: every code path, small
  check tests 120 tests
  check cartpole 200 cartpole
  check posttrain 200 posttrain
  check breakout 90 breakout --seconds 30
  check scaling-waiting 120 scaling --env waiting --samplers 1 2 --seconds 4
  check scaling-cartpole 90 scaling --env cartpole --samplers 1 2 --seconds 4
  check scaling-lunarlander 90 scaling --env lunarlander --samplers 1 2 --seconds 4
else
  check tests 60 tests
  check cartpole 110 cartpole
  check posttrain 170 posttrain
  check breakout 215 breakout --seconds 180
  check scaling-waiting 120 scaling --env waiting --samplers 1 2 4 8 16 32 64 --seconds 4
  check scaling-cartpole 75 scaling --env cartpole --samplers 1 2 4 8 14 --seconds 4
  check scaling-lunarlander 75 scaling --env lunarlander --samplers 1 2 4 8 14 --seconds 4
fi
