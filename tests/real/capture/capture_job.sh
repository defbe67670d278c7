#!/bin/bash
# capture_job.sh OUT: on a host with two GPUs (or one: then the two nodes share it and 3-4 are left out), a job over two "nodes" (two torchrun agents, --nnodes 2, each in a PID
# and UTS namespace of its own with one GPU and its own `rlwatch watch --prometheus`), once with the last rank stalled
# and once with a collective mismatch, joined by `rlwatch fleet --json`; then a GPU-bound straggler and a healthy run
# on one host under a live `rlwatch watch --json` (and one `rlwatch report --json` of the straggler). Times are
# date +%s.%N; each case is tarred into OUT/CASE.tar.gz as it ends. rlwatch must be importable (PYTHONPATH) and py-spy on PATH.
# CASES (environment) picks some of job-stall, job-mismatch, straggler and healthy; all by default.
set -u
CASES=${CASES:-job-stall job-mismatch straggler healthy}
want() { case " $CASES " in *" $1 "*) return 0;; esac; return 1; }
OUT=$1; W=/tmp/job; rm -rf $W; mkdir -p $W
HERE=$(cd "$(dirname "$0")" && pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1
{ python3 -c 'import torch;print("torch",torch.__version__,"cuda",torch.version.cuda,"nccl",".".join(map(str,torch.cuda.nccl.version())))'
  python3 --version; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; uname -r; nproc
  py-spy --version; python3 -m rlwatch --version; } > $W/VERSIONS 2>&1
now() { date +%s.%N; }
# With one GPU, both nodes' ranks share it (NCCL sees two hosts: their hostnames differ) and 3-4 are left out.
NGPU=$(nvidia-smi -L | grep -c '^GPU'); GPU_B=$((NGPU > 1 ? 1 : 0)); echo "GPUs: $NGPU" >> $W/VERSIONS
waitfor() { local end=$((SECONDS+$3)); while [ $SECONDS -lt $end ]; do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.2; done; return 1; }
UNS=()
node() { # name node_rank gpu port mode case nccl_timeout
  local d=$W/$6/$1; mkdir -p $d
  unshare --pid --fork --mount-proc --uts --kill-child sh -c "
    python3 -c 'import socket; socket.sethostname(\"$1\")'; cd $d
    export CUDA_VISIBLE_DEVICES=$3 TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_FR_DUMP_TEMP_FILE=$d/nccl_trace_rank_ \
      TORCH_NCCL_DUMP_ON_TIMEOUT=1 TORCH_NCCL_DEBUG_INFO_PIPE_FILE=$d/nccl_pipe_rank_ EVERY_RANK_LOGS=1 NCCL_TIMEOUT_S=$7
    torchrun --nnodes 2 --nproc-per-node 1 --node-rank $2 --master-addr 127.0.0.1 --master-port 29521 \
      --rdzv-id exp-gpu $HERE/collective_2gpu.py $5 100 > torchrun.log 2>&1 &
    python3 -m rlwatch watch $d --prometheus 127.0.0.1:$4 --json > watch.jsonl 2> watch.err &
    wait" > $d/node.log 2>&1 &
  UNS+=($!)
}
fleet_until_named() { # case seconds
  local c=$W/$1 end=$((SECONDS+$2)) i=0
  printf 'fleet:\n  exporters: [127.0.0.1:9491, 127.0.0.1:9492]\n' > $c/fleet.yaml
  while [ $SECONDS -lt $end ]; do
    i=$((i+1)); local t=$(now)
    python3 -m rlwatch fleet --config $c/fleet.yaml --json > $c/fleet.json 2> $c/fleet.err
    if python3 -c 'import json,sys; j=json.load(open(sys.argv[1]))["jobs"]; sys.exit(0 if any(x["culprit_ranks"] or x["collective"] for x in j) else 1)' $c/fleet.json 2>/dev/null; then
      echo $t > $c/T_VERDICT; cp $c/fleet.json $c/fleet-named.json; echo "fleet named after $i reads"; return 0; fi
    sleep 1
  done; echo "fleet named nobody within $2 s"; return 1
}
# unshare --fork does not die of SIGTERM while it waits; SIGKILL ends it, and --kill-child its namespace with it.
stop_nodes() { for p in "${UNS[@]}"; do kill -9 $p 2>/dev/null; done; wait "${UNS[@]}" 2>/dev/null; UNS=(); sleep 2
  (cd $W && tar czf $OUT/$1.tar.gz --exclude='*.pipe' $1); }

# ---- 1. a job over two nodes, the last rank stalled at step 11 (NCCL's timeout 300 s: the watchdog does not end it)
if want job-stall; then C=$W/job-stall; mkdir -p $C; now > $C/T_START
node node-a 0 0 9491 stall job-stall 300; node node-b 1 $GPU_B 9492 stall job-stall 300
if waitfor $C/node-a/train.log 'rank0\]: Train step 10/' 150; then
  now > $C/T_LAST_STEP
  fleet_until_named job-stall 90
  # each host's own verdict (RAS counts read in the quiet): kept running until both say hung, 75 s at most
  for n in node-a node-b; do
    waitfor $C/$n/watch.jsonl '"run_state": {"state": "hung"' 75 && now > $C/T_HOST_HUNG_$n
  done
  python3 $HERE/ras_query.py > $C/ras-status.txt 2>&1
  python3 -m rlwatch fleet --config $C/fleet.yaml --json > $C/fleet-end.json 2>&1
else echo "job-stall: no step 10"; fi
stop_nodes job-stall; fi

# ---- 2. the same job with a collective mismatch at step 12 (NCCL's timeout 30 s: its watchdog dumps the records)
if want job-mismatch; then C=$W/job-mismatch; mkdir -p $C; now > $C/T_START
node node-a 0 0 9491 mismatch job-mismatch 30; node node-b 1 $GPU_B 9492 mismatch job-mismatch 30
if waitfor $C/node-a/train.log 'rank0\]: Train step 11/' 150; then
  now > $C/T_LAST_STEP; sleep 8
  python3 $HERE/ras_query.py > $C/ras-status.txt 2>&1
  fleet_until_named job-mismatch 50
  waitfor $C/node-a/watch.jsonl collective_ 50 && now > $C/T_FINDING_A
  python3 -m rlwatch fleet --config $C/fleet.yaml --json > $C/fleet-end.json 2>&1
else echo "job-mismatch: no step 11"; fi
stop_nodes job-mismatch; fi

# ---- 3. a GPU-bound straggler (rank 1: 4x the matrix work) and 4. a healthy run, on one host, watched live
for mode in $([ $NGPU -gt 1 ] && echo straggler healthy); do
  want $mode || continue
  C=$W/$mode; mkdir -p $C; cd $C; now > T_START
  TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_FR_DUMP_TEMP_FILE=$C/nccl_trace_rank_ setsid torchrun --nproc-per-node 2 \
    $HERE/collective_2gpu.py $mode 400 > torchrun.log 2>&1 &
  TR=$!
  python3 -m rlwatch watch $C --json > watch.jsonl 2> watch.err & WA=$!
  waitfor train.log 'step 3/' 90
  sleep 40; now > T_REPORT; python3 -m rlwatch report $C --json > report.json 2> report.err; now > T_REPORT_END
  waitfor watch.jsonl gpu_straggler 35 && now > T_FINDING
  kill $WA; kill -9 -- -$TR 2>/dev/null; wait $TR $WA 2>/dev/null; now > T_END; sleep 3
  (cd $W && tar czf $OUT/$mode.tar.gz --exclude='*.pipe' $mode)
done
cd $W
for c in job-stall job-mismatch straggler healthy; do
  echo "== $c"; for f in T_START T_LAST_STEP T_VERDICT T_FINDING_A T_REPORT T_FINDING T_END; do
    [ -f $c/$f ] && echo "$f $(cat $c/$f)"; done
  [ -f $c/fleet-named.json ] && python3 -c 'import json,sys; [print(j["message"]) for j in json.load(open(sys.argv[1]))["jobs"]]' $c/fleet-named.json
  grep -ho '"code": *"[a-z_]*"' $c/watch.jsonl $c/*/watch.jsonl 2>/dev/null | sort | uniq -c
  [ -f $c/report.json ] && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); [print("report:", f["code"], f["message"][:300]) for f in d["findings"]]' $c/report.json
done
cp VERSIONS $OUT/; ls -la $OUT
