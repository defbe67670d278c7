#!/usr/bin/env bash
# Runs every scenario of verl_shaped.py and openrlhf_shaped.py on a real Ray cluster and keeps, per case:
#   driver.log      the driver's stdout+stderr as `... 2>&1 | tee driver.log` shows it (for OpenRLHF: what
#                   `ray job submit` prints while it tails the job)
#   ray_logs/       the session log files that matter (raylet*.out/.err, gcs_server.out/.err, job-driver-*.log,
#                   python-core-driver-*.log, worker-*.out/.err and python-core-worker-*.log of the processes the
#                   case involved), files over 200 KB cut to head+tail at whole lines; LISTING.txt = `ls -l` of the
#                   whole logs directory
#   state_*.json    ray.util.state list_actors / list_workers / list_nodes (detail=True), taken while the cluster
#                   still lived (after the failure for failure cases, mid-run for healthy ones)
#   ray_list_actors.txt  `ray list actors --detail` at the same moment
#   ps.txt          `ps -ww -eo pid,ppid,pgid,sid,user,lstart,args` taken mid-run, keeping the header and the
#                   lines of this capture's processes (the venv, /tmp/ray, ray::, raylet, gcs_server)
#   checkpoints/    what the run wrote (stub files: layout and names are the frameworks', contents are not)
#   COMMAND, VERSIONS, EXIT
#
#   capture.sh OUT_DIR [case ...]      (default: every case)
#
# Scratch: $SCRATCH (default /srv/scratch; venv in $SCRATCH/venv, runs in $SCRATCH/runs/<case>). Afterwards the scratch
# paths are written as /srv/run (the case's run dir) and /srv/run/venv; nothing else is edited.
set -u
OUT=$(realpath "${1:?OUT_DIR}")
shift
SCRATCH=${SCRATCH:-/srv/scratch}  # a scratch directory: a venv with ray[default] and the runs
VENV=$SCRATCH/venv
JOBS=$(cd "$(dirname "$0")" && pwd)
PY=$VENV/bin/python
export PATH=$VENV/bin:$PATH
# Ray 2.60 turns token authentication on by default; ray.init() finds the token by itself, the CLI and the State API
# client need RAY_AUTH_MODE=token. It is given to those commands only, never to `ray start --head` or the drivers.
AUTH="env RAY_AUTH_MODE=token"
CASES=("$@")
[ ${#CASES[@]} -eq 0 ] && CASES=(verl-healthy verl-actor-raises verl-actor-sigkill verl-oom-killed verl-oom-killed-tight verl-hang
  verl-resume openrlhf-healthy openrlhf-actor-sigkill openrlhf-node-dies openrlhf-engine-init-fails
  openrlhf-job-stopped)

log() { echo "[capture $(date +%H:%M:%S)] $*" >&2; }

no_cluster_running() {
  # Refuse to start when any Ray cluster already runs here: `ray stop` at the end must only meet ours.
  if ps -eo args | grep -E '(^|/)(raylet|gcs_server)( |$)' | grep -v grep >/dev/null; then
    log "a Ray cluster is already running on this machine; not starting"
    exit 2
  fi
}

wait_for() {  # wait_for FILE REGEX TIMEOUT_S
  local i=0
  while ! grep -a -q -E "$2" "$1" 2>/dev/null; do
    sleep 0.5
    i=$((i + 1))
    if [ $i -ge $(($3 * 2)) ]; then log "timed out waiting for /$2/ in $1"; return 1; fi
  done
  return 0
}

# The driver's stdout is a pipe, so Python buffers it (as it does for anyone running `... | tee train.log`):
# the capture times its actions on what the run writes to disk, or on the process titles, not on driver.log.
wait_path() {  # wait_path PATH TIMEOUT_S
  local i=0
  while [ ! -e "$1" ]; do
    sleep 0.25
    i=$((i + 1))
    if [ $i -ge $(($2 * 4)) ]; then log "timed out waiting for $1"; return 1; fi
  done
  return 0
}

wait_proc() {  # wait_proc REGEX TIMEOUT_S  (a process whose args match)
  local i=0
  while ! ps -ww -eo args | grep -v grep | grep -q -E "$1"; do
    sleep 0.25
    i=$((i + 1))
    if [ $i -ge $(($2 * 4)) ]; then log "timed out waiting for a process /$1/"; return 1; fi
  done
  return 0
}

snap_ps() {
  ps -ww -eo pid,ppid,pgid,sid,user,lstart,args |
    awk -v s="$SCRATCH" 'NR==1 || index($0, s) || /\/tmp\/ray\// || /ray::/ || /raylet/ || /gcs_server/ || /ray-dashboard/' |
    grep -v -E 'awk -v s=|grep -v -E|capture\.sh' >"$1"
}

dump_state() {  # dump_state DIR  (all three lists)
  $AUTH "$PY" "$JOBS/dump_state.py" "$1" --workers 2>"$1/.dump_state.err" || log "state dump failed: $(tail -1 "$1/.dump_state.err")"
  $AUTH ray list actors --detail >"$1/ray_list_actors.txt" 2>>"$1/.dump_state.err" || true
  [ -s "$1/.dump_state.err" ] || rm -f "$1/.dump_state.err"
}

start_head() {  # start_head NUM_CPUS [extra ray start args]
  local n=$1
  shift
  no_cluster_running
  ray start --head --num-cpus="$n" --disable-usage-stats "$@" >"$RUN/ray_start.log" 2>&1 || { log "ray start failed"; cat "$RUN/ray_start.log"; exit 3; }
}

stop_cluster() {
  ray stop >>"$RUN/ray_stop.log" 2>&1
  sleep 2
  if ps -eo args | grep -E '(^|/)(raylet|gcs_server)( |$)' | grep -v grep >/dev/null; then
    ray stop --force >>"$RUN/ray_stop.log" 2>&1
  fi
}

trim_copy() {  # trim_copy SRC DST : copy, cutting files over 200 KB to head+tail at whole lines
  local src=$1 dst=$2 size
  size=$(stat -c %s "$src")
  if [ "$size" -le 204800 ]; then
    cp "$src" "$dst"
  else
    "$PY" - "$src" "$dst" <<'EOF'
import sys
src, dst = sys.argv[1], sys.argv[2]
data = open(src, "rb").read()
lines = data.splitlines(keepends=True)
head, tail, n = [], [], 0
for ln in lines:
    if n + len(ln) > 100 * 1024:
        break
    head.append(ln); n += len(ln)
n = 0
for ln in reversed(lines[len(head):]):
    if n + len(ln) > 100 * 1024:
        break
    tail.append(ln); n += len(ln)
tail.reverse()
cut = len(lines) - len(head) - len(tail)
cut_bytes = len(data) - sum(map(len, head)) - sum(map(len, tail))
with open(dst, "wb") as f:
    f.writelines(head)
    f.write(f"[... capture.sh: {cut} lines ({cut_bytes} bytes) cut here; the file had {len(lines)} lines, {len(data)} bytes ...]\n".encode())
    f.writelines(tail)
EOF
    echo "$(basename "$dst"): $size bytes, cut to head+tail" >>"$CASE_OUT/ray_logs/TRIMMED.txt"
  fi
}

copy_logs() {
  local logs=/tmp/ray/session_latest/logs pids p f
  mkdir -p "$CASE_OUT/ray_logs"
  ls -l "$logs" >"$CASE_OUT/ray_logs/LISTING.txt"
  for f in "$logs"/raylet*.out "$logs"/raylet*.err "$logs"/gcs_server.out "$logs"/gcs_server.err \
    "$logs"/job-driver-*.log "$logs"/python-core-driver-*.log; do
    [ -s "$f" ] && trim_copy "$f" "$CASE_OUT/ray_logs/$(basename "$f")"
  done
  # the processes this case involved: pids in Ray's prefixes and messages, and the actors' pids in the state dump
  pids=$( (grep -a -o -E 'pid=[0-9]+' "$RUN/driver.log" | cut -d= -f2
    [ -f "$CASE_OUT/state_actors.json" ] && grep -o -E '"pid": [0-9]+' "$CASE_OUT/state_actors.json" | awk '{print $2}') | sort -u)
  for p in $pids; do
    for f in "$logs"/worker-*-"$p".out "$logs"/worker-*-"$p".err "$logs"/python-core-worker-*_"$p".log; do
      [ -s "$f" ] && trim_copy "$f" "$CASE_OUT/ray_logs/$(basename "$f")"
    done
  done
}

finish_case() {  # after the cluster is gone: checkpoints, path rewrite
  if [ -d "$RUN/checkpoints" ]; then cp -r "$RUN/checkpoints" "$CASE_OUT/checkpoints"; fi
  cp "$RUN/driver.log" "$CASE_OUT/driver.log"
  cp "$RUN/ps.txt" "$CASE_OUT/ps.txt" 2>/dev/null || true
  # the only edit: scratch paths -> /srv/run (run dir) and /srv/run/venv (the venv); jobs were run from $RUN/jobs
  grep -rlI -e "$SCRATCH" "$CASE_OUT" | while read -r f; do
    sed -i -e "s#$RUN#/srv/run#g" -e "s#$SCRATCH/venv#/srv/run/venv#g" -e "s#$SCRATCH/runs/[a-z0-9-]*#/srv/run#g" "$f"
  done
  write_versions >"$CASE_OUT/VERSIONS"
}

write_versions() {
  echo "python $("$PY" -c 'import platform; print(platform.python_version())')"
  echo "ray $("$PY" -c 'import ray; print(ray.__version__, ray.__commit__)') (pip: ray[default]==2.60.0)"
  echo "tqdm $("$PY" -c 'import tqdm; print(tqdm.__version__)')"
  echo "os $(. /etc/os-release && echo "$PRETTY_NAME"), kernel $(uname -r) $(uname -m)"
  echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host 2-core x86_64 CPU VM, no GPU, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo) RAM"
  echo "shape verl $VERL_COMMIT (volcengine/verl), OpenRLHF v0.11.0 $OPENRLHF_COMMIT (OpenRLHF/OpenRLHF)"
}
VERL_COMMIT=b178a3cd56f58b2d502255daba591e92833930a7
OPENRLHF_COMMIT=3c3be6234e0cb353e76bb8019947db9dfe99fca7

new_case() {
  CASE=$1
  RUN=$SCRATCH/runs/$CASE
  CASE_OUT=$OUT/$CASE
  rm -rf "$RUN" "$CASE_OUT"
  mkdir -p "$RUN" "$CASE_OUT"
  cp -r "$JOBS" "$RUN/jobs"
  rm -rf "$RUN/jobs/__pycache__"
  log "== $CASE"
}

# run_driver CMD... : runs CMD in $RUN in the background, stdout+stderr through tee into driver.log;
# $RUN/driver.pid holds the pid of CMD itself (not tee's)
run_driver() {
  # (commands started with & by a non-interactive shell inherit SIGINT ignored; the small python exec restores the
  # default disposition, so that SIGINT acts as a Ctrl-C would)
  (cd "$RUN" && bash -c 'echo $$ >driver.pid; exec "$0" -c "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])" "$@"' "$PY" "$@" 2>&1 | tee -a "$RUN/driver.log" >/dev/null; echo "${PIPESTATUS[0]}" >"$RUN/driver.rc") &
  DRIVER_BG=$!
  while [ ! -s "$RUN/driver.pid" ]; do sleep 0.1; done
}

wait_driver() {  # wait_driver TIMEOUT_S
  local i=0
  while kill -0 "$DRIVER_BG" 2>/dev/null; do
    sleep 1
    i=$((i + 1))
    if [ $i -ge "$1" ]; then
      log "driver still running after $1 s: SIGTERM to its pid $(cat "$RUN/driver.pid")"
      kill -TERM "$(cat "$RUN/driver.pid")" 2>/dev/null
      sleep 5
    fi
  done
  wait "$DRIVER_BG" 2>/dev/null
  echo "driver exit status: $(cat "$RUN/driver.rc")" >"$CASE_OUT/EXIT"
}

VERL="python jobs/verl_shaped.py"
ORLHF_ARGS="--ckpt.path $SCRATCH/runs/CASE/checkpoints/ckpt/checkpoints_ppo_ray --ckpt.output_dir $SCRATCH/runs/CASE/checkpoints/ckpt/final --ckpt.save_steps 2"

case_verl_healthy() {
  new_case verl-healthy
  no_cluster_running
  # a single-node run as verl's quickstart: the driver's ray.init() starts the cluster
  echo "cd /srv/run && $VERL /srv/run --scenario healthy --steps 12 --save-freq 4 --test-freq 4 --num-cpus 4 2>&1 | tee driver.log" >"$CASE_OUT/COMMAND"
  run_driver $VERL "$RUN" --scenario healthy --steps 12 --save-freq 4 --test-freq 4 --num-cpus 4
  wait_path "$RUN/checkpoints/global_step_8" 120 && { snap_ps "$RUN/ps.txt"; dump_state "$CASE_OUT"; }
  wait_driver 180
  copy_logs
  finish_case
}

verl_failure_case() {  # verl_failure_case CASE SCENARIO [extra env for ray start]
  local case=$1 scen=$2
  new_case "$case"
  start_head 4
  {
    echo "ray start --head --num-cpus=4 --disable-usage-stats"
    echo "cd /srv/run && $VERL /srv/run --scenario $scen --steps 12 --fail-step 6 --save-freq 4 --test-freq 4 2>&1 | tee driver.log"
  } >"$CASE_OUT/COMMAND"
  run_driver $VERL "$RUN" --scenario "$scen" --steps 12 --fail-step 6 --save-freq 4 --test-freq 4
  wait_path "$RUN/checkpoints/global_step_4" 120 && snap_ps "$RUN/ps.txt"
  wait_driver 180
  sleep 2
  dump_state "$CASE_OUT"
  copy_logs
  stop_cluster
  finish_case
}

case_verl_actor_raises() { verl_failure_case verl-actor-raises actor-raises; }
case_verl_actor_sigkill() { verl_failure_case verl-actor-sigkill actor-sigkill; }

case_verl_oom_killed() { verl_oom_case verl-oom-killed 3.0; }
case_verl_oom_killed_tight() { verl_oom_case verl-oom-killed-tight 1.5; }

verl_oom_case() {  # verl_oom_case CASE MARGIN_GIB
  local margin=$2
  new_case "$1"
  # Ray's memory monitor: threshold = what the node uses now + MARGIN GiB, polled every 250 ms; the worker grows by
  # 128 MiB pieces up to 6 GiB at most (this VM has 23.6 GiB)
  local thr
  thr=$(awk -v m="$margin" '/MemTotal/ {t=$2} /MemAvailable/ {a=$2} END {printf "%.3f", (t - a + m*1048576) / t}' /proc/meminfo)
  RAY_memory_usage_threshold=$thr RAY_memory_monitor_refresh_ms=250 start_head 4
  {
    echo "RAY_memory_usage_threshold=$thr RAY_memory_monitor_refresh_ms=250 ray start --head --num-cpus=4 --disable-usage-stats"
    echo "# threshold = (MemTotal - MemAvailable + $margin GiB) / MemTotal just before ray start (the cluster's own memory counts against it)"
    echo "cd /srv/run && $VERL /srv/run --scenario oom-killed --steps 12 --fail-step 6 --save-freq 4 --test-freq 4 --oom-cap-gib 6 2>&1 | tee driver.log"
  } >"$CASE_OUT/COMMAND"
  run_driver $VERL "$RUN" --scenario oom-killed --steps 12 --fail-step 6 --save-freq 4 --test-freq 4 --oom-cap-gib 6
  wait_path "$RUN/checkpoints/global_step_4" 120 && snap_ps "$RUN/ps.txt"
  wait_driver 180
  sleep 2
  dump_state "$CASE_OUT"
  copy_logs
  stop_cluster
  finish_case
}

case_verl_hang() {
  new_case verl-hang
  start_head 4
  {
    echo "ray start --head --num-cpus=4 --disable-usage-stats"
    echo "cd /srv/run && $VERL /srv/run --scenario hang --steps 12 --fail-step 6 --save-freq 4 --test-freq 4 2>&1 | tee driver.log"
    echo "# ~40 s after the hang began (42 s after checkpoints/global_step_4 appeared): state dump and ps, then SIGINT to the driver (Ctrl-C)"
  } >"$CASE_OUT/COMMAND"
  run_driver $VERL "$RUN" --scenario hang --steps 12 --fail-step 6 --save-freq 4 --test-freq 4
  if wait_path "$RUN/checkpoints/global_step_4" 120; then
    sleep 42   # step 6 hangs about 2 s after global_step_4 is written
    snap_ps "$RUN/ps.txt"
    dump_state "$CASE_OUT"
    sleep 2
    kill -INT "$(cat "$RUN/driver.pid")"   # as Ctrl-C would
  fi
  wait_driver 60
  copy_logs
  stop_cluster
  finish_case
}

case_verl_resume() {
  new_case verl-resume
  start_head 4
  {
    echo "ray start --head --num-cpus=4 --disable-usage-stats"
    echo "cd /srv/run && $VERL /srv/run --scenario actor-sigkill --steps 12 --fail-step 6 --save-freq 4 --test-freq 4 2>&1 | tee -a driver.log"
    echo "cd /srv/run && $VERL /srv/run --scenario healthy --steps 12 --save-freq 4 --test-freq 4 --resume-mode auto 2>&1 | tee -a driver.log"
  } >"$CASE_OUT/COMMAND"
  run_driver $VERL "$RUN" --scenario actor-sigkill --steps 12 --fail-step 6 --save-freq 4 --test-freq 4
  wait_driver 180
  local rc1
  rc1=$(cat "$RUN/driver.rc")
  rm -f "$RUN/driver.pid"
  run_driver $VERL "$RUN" --scenario healthy --steps 12 --save-freq 4 --test-freq 4 --resume-mode auto
  wait_path "$RUN/checkpoints/global_step_8" 120 && snap_ps "$RUN/ps.txt"
  wait_driver 180
  echo "first run exit status: $rc1; relaunch $(cat "$CASE_OUT/EXIT")" >"$CASE_OUT/EXIT"
  sleep 2
  dump_state "$CASE_OUT"
  copy_logs
  stop_cluster
  finish_case
}

# ---- OpenRLHF: `ray start --head` then `ray job submit`, as OpenRLHF's README does
orlhf_submit() {  # orlhf_submit EXTRA_ARGS...
  local args=${ORLHF_ARGS//CASE/$CASE}
  echo "RAY_AUTH_MODE=token ray job submit --address=http://127.0.0.1:8265 --runtime-env-json='{\"working_dir\": \"/srv/run/jobs\"}' -- python3 openrlhf_shaped.py ${args//$SCRATCH\/runs\/$CASE//srv/run} $* 2>&1 | tee driver.log" >>"$CASE_OUT/COMMAND"
  # shellcheck disable=SC2086
  run_driver $AUTH ray job submit --address=http://127.0.0.1:8265 --runtime-env-json="{\"working_dir\": \"$RUN/jobs\"}" \
    -- python3 openrlhf_shaped.py $args "$@"
}

orlhf_case() {  # orlhf_case CASE NUM_CPUS SCENARIO_ARGS...
  local case=$1 ncpu=$2
  shift 2
  new_case "$case"
  start_head "$ncpu"
  echo "ray start --head --num-cpus=$ncpu --disable-usage-stats" >"$CASE_OUT/COMMAND"
  orlhf_submit "$@"
}

orlhf_end() {  # orlhf_end [SECONDS to wait before the state dump]
  wait_driver 180
  sleep "${1:-2}"
  dump_state "$CASE_OUT"
  copy_logs
  stop_cluster
  finish_case
}

case_openrlhf_healthy() {
  orlhf_case openrlhf-healthy 8 --scenario healthy
  wait_path "$RUN/checkpoints/ckpt/checkpoints_ppo_ray/_actor/global_step2/metric.json" 120 && snap_ps "$RUN/ps.txt"
  orlhf_end
}

case_openrlhf_actor_sigkill() {
  orlhf_case openrlhf-actor-sigkill 8 --scenario actor-sigkill --fail_step 5
  wait_path "$RUN/checkpoints/ckpt/checkpoints_ppo_ray/_actor/global_step2/metric.json" 120 && snap_ps "$RUN/ps.txt"
  orlhf_end
}

case_openrlhf_engine_init_fails() {
  orlhf_case openrlhf-engine-init-fails 8 --scenario engine-init-fails
  wait_proc '^ray::(RolloutRayActor|PolicyModelActor)' 120 && snap_ps "$RUN/ps.txt"
  orlhf_end
}

case_openrlhf_job_stopped() {
  orlhf_case openrlhf-job-stopped 8 --scenario healthy
  if wait_path "$RUN/checkpoints/ckpt/checkpoints_ppo_ray/_actor/global_step2/metric.json" 120; then
    snap_ps "$RUN/ps.txt"
    local sid
    sid=$(grep -a -o -E "raysubmit_[A-Za-z0-9]+" "$RUN/driver.log" | head -1)
    echo "RAY_AUTH_MODE=token ray job stop $sid   # run once _actor/global_step2/metric.json exists (step 3 under way)" >>"$CASE_OUT/COMMAND"
    $AUTH ray job stop "$sid" >"$CASE_OUT/ray_job_stop.txt" 2>&1
  fi
  orlhf_end
}

case_openrlhf_node_dies() {
  new_case openrlhf-node-dies
  start_head 6
  # a second node on the same host (its own raylet): the vLLM engine and the policy's rank 1 are placed there
  $AUTH ray start --address="$(hostname -I | awk '{print $1}'):6379" --num-cpus=2 \
    --resources='{"node2": 1}' --disable-usage-stats >>"$RUN/ray_start.log" 2>&1
  {
    echo "ray start --head --num-cpus=6 --disable-usage-stats"
    echo "RAY_AUTH_MODE=token ray start --address=<head ip>:6379 --num-cpus=2 --resources='{\"node2\": 1}' --disable-usage-stats   # second node, same host"
  } >"$CASE_OUT/COMMAND"
  orlhf_submit --scenario healthy --names v0.10.1 --place_on_node2
  if wait_path "$RUN/checkpoints/ckpt/checkpoints_ppo_ray/_actor/global_step2/metric.json" 120; then
    snap_ps "$RUN/ps.txt"
    local rpid
    rpid=$(ps -ww -eo pid,args | awk '/raylet\/raylet/ && /sockets\/raylet\.1 / {print $1}' | head -1)
    echo "kill -KILL <pid of the second node's raylet>   # once _actor/global_step2/metric.json exists, step 3 under way (pid $rpid)" >>"$CASE_OUT/COMMAND"
    kill -KILL "$rpid"
  fi
  orlhf_end 25   # the GCS marks the node dead after its health checks fail (~10 s): dump after that
}

for c in "${CASES[@]}"; do
  fn="case_${c//-/_}"
  "$fn"
done
log "done"
