#!/usr/bin/env bash
# Make the real-framework corpus on a GPU host: each case in its own directory under $1, with the exact command,
# the versions and the GPU beside its output. Needs torch, transformers, accelerate, TRL and datasets.
set -u
ROOT=${1:?usage: capture.sh OUT_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$ROOT"
versions() {
  python3 - <<'PY'
import platform, importlib
print("python", platform.python_version())
for name in ("torch", "transformers", "accelerate", "trl", "datasets"):
    try:
        print(name, importlib.import_module(name).__version__)
    except Exception as exc:
        print(name, "absent", type(exc).__name__)
import torch
print("cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())))
PY
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
}
case_dir() { mkdir -p "$ROOT/$1"; versions > "$ROOT/$1/VERSIONS" 2>&1; }

# 1. tiny model + TRL GRPO, colocated generation, checkpoints every 5 steps; killed with SIGKILL after checkpoint-10,
#    then resumed from it to step 30.
case_dir trl-grpo-colocated
D=$ROOT/trl-grpo-colocated
python3 "$HERE/tiny_model.py" /tmp/tiny > "$D/tiny_model.log" 2>&1
echo "python3 grpo_colocated.py /tmp/tiny $D/run 30 >> train.log 2>&1; kill -KILL after checkpoint-10; then again with 'resume'" > "$D/COMMAND"
cd "$D" && mkdir -p run
python3 "$HERE/grpo_colocated.py" /tmp/tiny "$D/run" 30 >> "$D/run/train.log" 2>&1 &
PID=$!
for _ in $(seq 600); do [ -d "$D/run/checkpoint-10" ] && break; kill -0 $PID 2>/dev/null || break; sleep 0.5; done
sleep 2; kill -KILL $PID; wait $PID; echo "killed with SIGKILL, exit $?" > "$D/KILLED"
python3 "$HERE/grpo_colocated.py" /tmp/tiny "$D/run" 30 resume >> "$D/run/train.log" 2>&1; echo "resume exit $?" >> "$D/KILLED"
find "$D/run" -name '*.safetensors' -o -name '*.pt' -o -name '*.pth' -o -name '*.bin' | while read -r f; do
  echo "$(stat -c %s "$f") $f" >> "$D/WEIGHTS_REMOVED"; rm -f "$f"; done
cd "$HERE"

# 2. CUDA out of memory
case_dir cuda-oom
echo "python3 cuda_oom.py > oom.log 2>&1" > "$ROOT/cuda-oom/COMMAND"
python3 "$HERE/cuda_oom.py" > "$ROOT/cuda-oom/oom.log" 2>&1; echo "exit $?" > "$ROOT/cuda-oom/EXIT"

# 3. NCCL collective timeout under torchrun (rank 0 root cause, SIGABRT; rank 1 victim)
case_dir torchrun-nccl-timeout
echo "TORCH_NCCL_ASYNC_ERROR_HANDLING=1 torchrun --nproc-per-node 2 nccl_timeout.py > torchrun.log 2>&1" > "$ROOT/torchrun-nccl-timeout/COMMAND"
TORCH_NCCL_ASYNC_ERROR_HANDLING=1 timeout 240 torchrun --nproc-per-node 2 "$HERE/nccl_timeout.py" > "$ROOT/torchrun-nccl-timeout/torchrun.log" 2>&1
echo "exit $?" > "$ROOT/torchrun-nccl-timeout/EXIT"

# 4. A Python exception in one rank under torchrun with @record (the error file makes torchrun print the traceback)
case_dir torchrun-exception
echo "torchrun --nproc-per-node 2 rank_raises.py > torchrun.log 2>&1" > "$ROOT/torchrun-exception/COMMAND"
timeout 200 torchrun --nproc-per-node 2 "$HERE/rank_raises.py" > "$ROOT/torchrun-exception/torchrun.log" 2>&1
echo "exit $?" > "$ROOT/torchrun-exception/EXIT"

# 4b. A Trainer under torchrun that fails once, then the same command again into the same log: it trains to the end
case_dir torchrun-relaunched
D=$ROOT/torchrun-relaunched
[ -d /tmp/tiny ] || python3 "$HERE/tiny_model.py" /tmp/tiny > /dev/null 2>&1
echo "torchrun --nproc-per-node 1 trainer_relaunched.py /tmp/tiny out >> train.log 2>&1; then the same command again" > "$D/COMMAND"
(cd "$D" && timeout 300 torchrun --nproc-per-node 1 "$HERE/trainer_relaunched.py" /tmp/tiny out >> train.log 2>&1
  echo "first exit $?" > EXIT
  timeout 300 torchrun --nproc-per-node 1 "$HERE/trainer_relaunched.py" /tmp/tiny out >> train.log 2>&1
  echo "second exit $?" >> EXIT
  rm -rf out)

# 5. GPU facts
case_dir gpu-facts
nvidia-smi > "$ROOT/gpu-facts/nvidia-smi.txt" 2>&1
nvidia-smi -q > "$ROOT/gpu-facts/nvidia-smi-q.txt" 2>&1
ls -l /dev/nvidia* > "$ROOT/gpu-facts/dev-nodes.txt" 2>&1
