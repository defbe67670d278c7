#!/bin/bash
# capture_collective.sh OUT: the four shapes of collective_2gpu.py on two GPUs, with NVML sampled, NCCL RAS asked
# while a rank is stalled, py-spy dumps of both ranks, and the flight recorder's dumps (on timeout, and through the
# debug pipe); everything tarred into OUT/collective.tar.gz.
set -u
OUT=$1; W=/tmp/cap; rm -rf $W; mkdir -p $W
HERE=$(cd "$(dirname "$0")" && pwd)
SPY=${SPY:-py-spy}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
{ python3 -c 'import torch;print("torch",torch.__version__,"cuda",torch.version.cuda,"nccl",".".join(map(str,torch.cuda.nccl.version())))'
  python3 --version; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; uname -r; nproc; } > $W/VERSIONS 2>&1
waitfor() { local end=$((SECONDS+$3)); while [ $SECONDS -lt $end ]; do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.5; done; return 1; }
pids() { grep -o '\[rank[01]\] pid [0-9]*' torchrun.log | awk '{print $3}'; }
spy() { for p in $(pids); do echo "== pid $p"; timeout 20 $SPY dump --pid $p; done > $1 2>&1; }
envs() { for p in $(pids); do echo "== pid $p"; tr '\0' '\n' < /proc/$p/environ | grep -E '^(RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|GROUP_RANK|ROLE_RANK|MASTER_ADDR|MASTER_PORT|TORCHELASTIC_RUN_ID|TORCH_FR|TORCH_NCCL|CUDA_VISIBLE)'; done > environ.txt 2>&1; }
run_case() { # name mode steps
  local d=$W/$1; mkdir -p $d; cd $d
  export TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_FR_DUMP_TEMP_FILE=$d/nccl_trace_rank_ TORCH_NCCL_DUMP_ON_TIMEOUT=1 TORCH_NCCL_DEBUG_INFO_PIPE_FILE=$d/nccl_pipe_rank_
  echo "TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_FR_DUMP_TEMP_FILE=RUN/nccl_trace_rank_ TORCH_NCCL_DUMP_ON_TIMEOUT=1 TORCH_NCCL_DEBUG_INFO_PIPE_FILE=RUN/nccl_pipe_rank_ NCCL_NVLS_ENABLE=0 torchrun --nproc-per-node 2 collective_2gpu.py $2 $3" > COMMAND
  nvidia-smi --query-gpu=timestamp,index,power.draw,clocks.sm,utilization.gpu,temperature.gpu --format=csv -lms 500 > nvidia-smi.csv 2>&1 & local smi=$!
  python3 $HERE/nvml_sample.py > nvml.jsonl 2>&1 & local nv=$!
  date +%s.%N > T_START
  timeout -s TERM 170 torchrun --nproc-per-node 2 $HERE/collective_2gpu.py $2 $3 > torchrun.log 2>&1 & local tr=$!
  case $2 in
    mismatch) waitfor train.log 'step 11/' 120 && { date +%s.%N > T_LAST_STEP; sleep 8; envs; python3 $HERE/ras_query.py > ras-status.txt 2>&1; spy pyspy.txt; } ;;
    stall) waitfor train.log 'step 10/' 120 && { date +%s.%N > T_LAST_STEP; sleep 6; envs; python3 $HERE/ras_query.py > ras-status.txt 2>&1; spy pyspy.txt
             for p in nccl_pipe_rank_*.pipe; do timeout 5 sh -c "echo 1 > $p"; done; ls -la > ls-after-pipe.txt
             sleep 6; mkdir -p pipe; for f in nccl_trace_rank_*; do cp $f pipe/; done; } ;;
    straggler|healthy) waitfor train.log 'step 5/' 120 && { sleep 8; envs; spy pyspy.txt; python3 $HERE/ras_query.py > ras-status.txt 2>&1; } ;;
  esac
  wait $tr; echo "exit $?" > EXIT; date +%s.%N > T_END
  kill $smi $nv 2>/dev/null; wait $smi $nv 2>/dev/null
  ls -la > ls.txt
  echo "== $1: $(cat EXIT), $(ls | tr '\n' ' ')"
}
run_case mismatch mismatch 100
run_case stall stall 100
run_case straggler straggler 36
run_case healthy healthy 100
cd $W && tar czf $OUT/collective.tar.gz . && ls -la $OUT
