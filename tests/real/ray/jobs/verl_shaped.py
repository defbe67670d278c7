"""A driver shaped like verl's `verl/trainer/main_ppo.py`, run on a real Ray cluster.

No model, no GPU: what is real is Ray (the driver, the `TaskRunner` actor, the `WorkerDict` actors in a
placement group, their deaths and Ray's messages about them) and the shape of what verl prints and writes:
the console metric line (verl/utils/logger/aggregate_logger.py: `concat_dict_to_str`, values through
`pprint.pformat`), the 'Training Progress' tqdm bar, the resume and save messages of
verl/trainer/ppo/ray_trainer.py, and the checkpoint layout (`global_step_N/actor/...`, `data.pt`,
`latest_checkpointed_iteration.txt` in `trainer.default_local_dir`). Metric values are made up; their
keys are verl's (verl/trainer/ppo/metric_utils.py, ray_trainer.py). See SOURCES.md.

    python verl_shaped.py RUN_DIR --scenario healthy|actor-raises|actor-sigkill|oom-killed|hang
"""

import argparse
import json
import math
import os
import pprint
import random
import signal
import socket
import string
import time
from pprint import pprint as pp

import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

WORLD_SIZE = 2


# verl/utils/logger/aggregate_logger.py, verbatim
def concat_dict_to_str(dict: dict, step):
    import numbers

    output = [f"step:{step}"]
    for k, v in dict.items():
        if isinstance(v, numbers.Number):
            output.append(f"{k}:{pprint.pformat(v)}")
    output_str = " - ".join(output)
    return output_str


class LocalLogger:
    def log(self, data, step):
        print(concat_dict_to_str(data, step=step), flush=True)


def get_random_string(length: int) -> str:  # verl/single_controller/ray/base.py
    letters_digits = string.ascii_letters + string.digits
    return "".join(random.choice(letters_digits) for _ in range(length))


class Worker:
    """Stands for verl.single_controller.base.worker.Worker (the base class verl's WorkerDict derives from)."""

    def __init__(self):
        self.rank = int(os.environ.get("RANK", "0"))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))


class WorkerDict(Worker):
    """Same class name as the colocated class verl builds in create_colocated_worker_cls; methods are named
    role + '_' + method as _bind_workers_method_to_parent names them (roles 'actor_rollout' and 'ref')."""

    def __init__(self, scenario: str, fail_step: int, oom_cap_gib: float):
        super().__init__()
        self.scenario = scenario
        self.fail_step = fail_step
        self.oom_cap_gib = oom_cap_gib
        self.rng = random.Random(1234 + self.rank)
        self._hog = []

    def actor_rollout_init_model(self):
        time.sleep(0.5)
        return os.getpid()

    def ref_init_model(self):
        return os.getpid()

    def actor_rollout_generate_sequences(self, step: int):
        if step == self.fail_step and self.rank == 1:
            if self.scenario == "actor-sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            if self.scenario == "oom-killed":
                # Grow resident memory in 128 MiB pieces until Ray's memory monitor kills this worker.
                chunk = 128 * 1024 * 1024
                while len(self._hog) * chunk < self.oom_cap_gib * 1024**3:
                    self._hog.append(bytearray(b"\x01") * chunk)
                    time.sleep(0.1)
                raise RuntimeError(f"memory monitor did not fire after {self.oom_cap_gib} GiB on rank {self.rank}")
        if step == self.fail_step and self.scenario == "hang":
            while True:  # blocks for ever, as a rank stuck in a collective would
                time.sleep(3600)
        time.sleep(0.6)
        lens = [self.rng.randint(60, 1024) for _ in range(64)]
        return {"response_lengths": lens, "prompt_lengths": [self.rng.randint(80, 260) for _ in range(64)]}

    def actor_rollout_compute_log_prob(self, step: int):
        time.sleep(0.15)
        return {"actor/entropy": 0.55 - 0.01 * step + self.rng.uniform(-0.02, 0.02)}

    def ref_compute_ref_log_prob(self, step: int):
        time.sleep(0.1)

    def actor_rollout_update_actor(self, step: int):
        if step == self.fail_step and self.scenario == "actor-raises" and self.rank == 1:
            raise RuntimeError(f"injected failure in update_actor (rank {self.rank}, step {step})")
        time.sleep(0.3)
        r = self.rng
        return {
            "actor/pg_clipfrac": r.uniform(0.0, 0.002),
            "actor/ppo_kl": r.uniform(-1e-5, 1e-5),
            "actor/pg_clipfrac_lower": r.uniform(0.0, 1e-6),
            "actor/pg_loss": r.uniform(-0.05, 0.05),
            "actor/kl_loss": 0.001 * step + r.uniform(0.0, 0.0005),
            "actor/kl_coef": 0.0010000000000000002,
            "actor/grad_norm": r.uniform(0.05, 0.3),
        }

    def actor_rollout_save_checkpoint(self, local_path: str, global_step: int):
        # verl/utils/checkpoint/fsdp_checkpoint_manager.py: every rank saves its shard, rank 0 the HF config
        os.makedirs(local_path, exist_ok=True)
        ws, rk = self.world_size, self.rank
        for kind in ("model", "optim", "extra_state"):
            with open(os.path.join(local_path, f"{kind}_world_size_{ws}_rank_{rk}.pt"), "w") as f:
                f.write(f"stub {kind} shard, step {global_step}\n")
        if rk == 0:
            hf = os.path.join(local_path, "huggingface")
            os.makedirs(hf, exist_ok=True)
            with open(os.path.join(hf, "config.json"), "w") as f:
                json.dump({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}, f)
            with open(os.path.join(hf, "generation_config.json"), "w") as f:
                json.dump({"eos_token_id": 151643}, f)
            with open(os.path.join(local_path, "fsdp_config.json"), "w") as f:
                json.dump({"FSDP_version": 2, "world_size": ws}, f, indent=4)
        return True

    def actor_rollout_load_checkpoint(self, local_path: str):
        return os.path.isdir(local_path)


class TaskRunner:
    """verl/trainer/main_ppo.py: TaskRunner.run builds the workers and runs RayPPOTrainer.fit in this actor."""

    def run(self, config):
        print(f"TaskRunner hostname: {socket.gethostname()}, PID: {os.getpid()}")
        pp(config)
        trainer = RayPPOTrainer(config)
        trainer.init_workers()
        trainer.fit()


def find_latest_ckpt_path(path, directory_format="global_step_{}"):  # verl/utils/checkpoint/checkpoint_manager.py
    tracker_file = os.path.join(path, "latest_checkpointed_iteration.txt")
    if not os.path.exists(tracker_file):
        print(f"Checkpoint tracker file does not exist: {tracker_file}")
        return None
    with open(tracker_file, "rb") as f:
        iteration = int(f.read().decode())
    ckpt_path = os.path.join(path, directory_format.format(iteration))
    if not os.path.exists(ckpt_path):
        print("Checkpoint does not exist: %s", ckpt_path)
        return None
    print("Found checkpoint: %s", ckpt_path)
    return ckpt_path


class RayPPOTrainer:
    def __init__(self, config):
        self.config = config
        t = config["trainer"]
        self.total_training_steps = t["total_training_steps"]
        self.train_len = t["total_training_steps"]
        print(f"Size of train dataloader: {self.train_len}, Size of val dataloader: 1")
        print(f"Total training steps: {self.total_training_steps}")
        self.rng = random.Random(7)

    def init_workers(self):
        s = self.config["scenario"]
        name_prefix = get_random_string(length=6)
        print(f"colocated worker base class {Worker}")
        # verl/single_controller/ray/base.py: RayResourcePool.get_placement_groups, RayWorkerGroup._create_worker
        pg = placement_group(
            [{"CPU": 1}] * WORLD_SIZE, strategy="STRICT_PACK", name=f"{name_prefix}verl_group_{WORLD_SIZE}:0"
        )
        ray.get(pg.ready())
        cls = ray.remote(WorkerDict)
        self.workers = []
        master_port = str(20000 + random.randint(0, 9999))
        for rank in range(WORLD_SIZE):
            env_vars = {
                "WORLD_SIZE": str(WORLD_SIZE),
                "RANK": str(rank),
                "WG_PREFIX": name_prefix,
                "WG_BACKEND": "ray",
                "RAY_LOCAL_WORLD_SIZE": str(WORLD_SIZE),
                "MASTER_ADDR": ray.util.get_node_ip_address(),
                "MASTER_PORT": master_port,
            }
            w = cls.options(
                runtime_env={"env_vars": env_vars},
                name=f"{name_prefix}WorkerDict_0:{rank}",
                num_cpus=1,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=pg, placement_group_bundle_index=rank
                ),
            ).remote(s["name"], s["fail_step"], s["oom_cap_gib"])
            self.workers.append(w)
        ray.get([w.ref_init_model.remote() for w in self.workers])
        ray.get([w.actor_rollout_init_model.remote() for w in self.workers])

    def _all(self, method, *args):
        return [getattr(w, method).remote(*args) for w in self.workers]

    def _get(self, refs):
        if self.config["scenario"]["name"] != "hang":
            return ray.get(refs)
        t0 = time.time()
        pending = list(refs)
        while pending:
            _, pending = ray.wait(pending, num_returns=len(pending), timeout=1.0)
            if pending:
                print(f"waiting for rollout workers... ({time.time() - t0:.0f}s)", flush=True)
        return ray.get(refs)

    def _validate(self):
        acc = round(0.30 + 0.02 * self.global_steps + self.rng.uniform(-0.01, 0.01), 4)
        return {
            "val-aux/openai/gsm8k/reward/mean@1": acc,
            "val-core/openai/gsm8k/acc/mean@1": acc,
            "val-aux/num_turns/min": 2,
            "val-aux/num_turns/max": 2,
            "val-aux/num_turns/mean": 2.0,
        }

    def _save_checkpoint(self):
        t = self.config["trainer"]
        local_global_step_folder = os.path.join(t["default_local_dir"], f"global_step_{self.global_steps}")
        print(f"local_global_step_folder: {local_global_step_folder}")
        actor_local_path = os.path.join(local_global_step_folder, "actor")
        ray.get(self._all("actor_rollout_save_checkpoint", actor_local_path, self.global_steps))
        os.makedirs(local_global_step_folder, exist_ok=True)
        with open(os.path.join(local_global_step_folder, "data.pt"), "w") as f:
            f.write(f"stub dataloader state, step {self.global_steps}\n")
        with open(os.path.join(t["default_local_dir"], "latest_checkpointed_iteration.txt"), "w") as f:
            f.write(str(self.global_steps))

    def _load_checkpoint(self):
        t = self.config["trainer"]
        if t["resume_mode"] == "disable":
            return 0
        global_step_folder = find_latest_ckpt_path(t["default_local_dir"])
        if t["resume_mode"] == "auto":
            if global_step_folder is None:
                print("Training from scratch")
                return 0
        elif t["resume_mode"] == "resume_path":
            global_step_folder = t["resume_from_path"]
        print(f"Load from checkpoint folder: {global_step_folder}")
        self.global_steps = int(global_step_folder.split("global_step_")[-1])
        print(f"Setting global step to {self.global_steps}")
        print(f"Resuming from {global_step_folder}")
        ray.get(self._all("actor_rollout_load_checkpoint", os.path.join(global_step_folder, "actor")))

    def fit(self):
        from tqdm import tqdm

        logger = LocalLogger()
        t = self.config["trainer"]
        self.global_steps = 0
        self._load_checkpoint()
        if t["val_before_train"]:
            val_metrics = self._validate()
            pp(f"Initial validation metrics: {val_metrics}")
            logger.log(data=val_metrics, step=self.global_steps)
        progress_bar = tqdm(total=self.total_training_steps, initial=self.global_steps, desc="Training Progress")
        self.global_steps += 1
        last_val_metrics = None
        r = self.rng
        while True:
            metrics, timing_raw = {}, {}
            is_last_step = self.global_steps >= self.total_training_steps
            step_t0 = time.time()
            timing_raw["start_profile"] = 1.1e-05
            t0 = time.time()
            gen = self._get(self._all("actor_rollout_generate_sequences", self.global_steps))
            timing_raw["gen"] = time.time() - t0
            resp = [x for g in gen for x in g["response_lengths"]]
            prompt = [x for g in gen for x in g["prompt_lengths"]]
            seqlens = [sum(g["response_lengths"]) + sum(g["prompt_lengths"]) for g in gen]
            t0 = time.time()
            scores = [1.0 if r.random() < 0.3 + 0.03 * self.global_steps else 0.0 for _ in resp]
            timing_raw["reward"] = time.time() - t0 + 0.05
            metrics.update(
                {
                    "global_seqlen/min": min(seqlens),
                    "global_seqlen/max": max(seqlens),
                    "global_seqlen/minmax_diff": max(seqlens) - min(seqlens),
                    "global_seqlen/balanced_min": sum(seqlens) // 2,
                    "global_seqlen/balanced_max": sum(seqlens) - sum(seqlens) // 2,
                    "global_seqlen/mean": sum(seqlens) / 2,
                }
            )
            t0 = time.time()
            ent = ray.get(self._all("actor_rollout_compute_log_prob", self.global_steps))
            timing_raw["old_log_prob"] = time.time() - t0
            metrics["actor/entropy"] = sum(e["actor/entropy"] for e in ent) / len(ent)
            metrics["perf/mfu/actor_infer"] = 0.0
            t0 = time.time()
            ray.get(self._all("ref_compute_ref_log_prob", self.global_steps))
            timing_raw["ref"] = time.time() - t0
            timing_raw["adv"] = 0.004 + r.uniform(0, 0.002)
            t0 = time.time()
            outs = ray.get(self._all("actor_rollout_update_actor", self.global_steps))
            timing_raw["update_actor"] = time.time() - t0
            timing_raw["update_weights"] = 0.2 + r.uniform(0, 0.05)
            for k in outs[0]:
                metrics[k] = sum(o[k] for o in outs) / len(outs)
            metrics["actor/loss"] = metrics["actor/pg_loss"] + metrics["actor/kl_coef"] * metrics["actor/kl_loss"]
            metrics["actor/perf/max_memory_allocated_gb"] = 0.0
            metrics["actor/perf/max_memory_reserved_gb"] = 0.0
            metrics["actor/perf/cpu_memory_used_gb"] = 1.2 + r.uniform(0, 0.1)
            metrics["actor/lr"] = 1e-06
            metrics["perf/mfu/actor"] = 0.0
            if t["test_freq"] > 0 and (is_last_step or self.global_steps % t["test_freq"] == 0):
                t0 = time.time()
                val_metrics = self._validate()
                timing_raw["testing"] = time.time() - t0 + 0.3
                if is_last_step:
                    last_val_metrics = val_metrics
                metrics.update(val_metrics)
            if t["save_freq"] > 0 and (is_last_step or self.global_steps % t["save_freq"] == 0):
                t0 = time.time()
                self._save_checkpoint()
                timing_raw["save_checkpoint"] = time.time() - t0
            timing_raw["stop_profile"] = 9e-06
            timing_raw["step"] = time.time() - step_t0
            metrics.update({"training/global_step": self.global_steps, "training/epoch": 0})
            n = len(resp)
            mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
            sm = mean(scores)
            std = math.sqrt(mean([(s - sm) ** 2 for s in scores])) or 1.0
            adv = [(s - sm) / std for s in scores]
            metrics.update(
                {
                    "critic/score/mean": sm,
                    "critic/score/max": max(scores),
                    "critic/score/min": min(scores),
                    "critic/rewards/mean": sm,
                    "critic/rewards/max": max(scores),
                    "critic/rewards/min": min(scores),
                    "critic/advantages/mean": mean(adv),
                    "critic/advantages/max": max(adv),
                    "critic/advantages/min": min(adv),
                    "critic/returns/mean": mean(adv),
                    "critic/returns/max": max(adv),
                    "critic/returns/min": min(adv),
                    "response_length/mean": float(mean(resp)),
                    "response_length/max": float(max(resp)),
                    "response_length/min": float(min(resp)),
                    "response_length/clip_ratio": sum(1 for x in resp if x >= 1024) / n,
                    "response_length_non_aborted/mean": float(mean(resp)),
                    "response_length_non_aborted/max": float(max(resp)),
                    "response_length_non_aborted/min": float(min(resp)),
                    "response_length_non_aborted/clip_ratio": sum(1 for x in resp if x >= 1024) / n,
                    "response/aborted_ratio": 0.0,
                    "prompt_length/mean": float(mean(prompt)),
                    "prompt_length/max": float(max(prompt)),
                    "prompt_length/min": float(min(prompt)),
                    "prompt_length/clip_ratio": 0.0,
                }
            )
            metrics.update({f"timing_s/{k}": v for k, v in timing_raw.items()})
            ntok = sum(resp) + sum(prompt)
            for k in ("gen", "reward", "old_log_prob", "ref", "adv", "update_actor"):
                metrics[f"timing_per_token_ms/{k}"] = timing_raw[k] * 1000 / ntok
            metrics.update(
                {
                    "perf/total_num_tokens": ntok,
                    "perf/time_per_step": timing_raw["step"],
                    "perf/throughput": ntok / (timing_raw["step"] * WORLD_SIZE),
                }
            )
            logger.log(data=metrics, step=self.global_steps)
            progress_bar.update(1)
            self.global_steps += 1
            if is_last_step:
                pp(f"Final validation metrics: {last_val_metrics}")
                progress_bar.close()
                return


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument(
        "--scenario", default="healthy", choices=["healthy", "actor-raises", "actor-sigkill", "oom-killed", "hang"]
    )
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--fail-step", type=int, default=6)
    ap.add_argument("--save-freq", type=int, default=4)
    ap.add_argument("--test-freq", type=int, default=4)
    ap.add_argument("--resume-mode", default="auto", choices=["auto", "disable", "resume_path"])
    ap.add_argument("--resume-from-path", default=None)
    ap.add_argument("--oom-cap-gib", type=float, default=6.0)
    ap.add_argument("--num-cpus", type=int, default=None, help="ray_kwargs.ray_init.num_cpus")
    a = ap.parse_args()
    run_dir = os.path.abspath(a.run_dir)
    config = {
        "actor_rollout_ref": {
            "actor": {"strategy": "fsdp2", "ppo_mini_batch_size": 64, "use_kl_loss": True, "kl_loss_coef": 0.001},
            "model": {"path": "Qwen/Qwen2.5-0.5B-Instruct"},
            "rollout": {"name": "vllm", "n": 4, "temperature": 1.0},
        },
        "algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False},
        "data": {"train_batch_size": 32, "max_prompt_length": 512, "max_response_length": 1024},
        "trainer": {
            "project_name": "verl_examples",
            "experiment_name": "gsm8k",
            "logger": ["console"],
            "nnodes": 1,
            "n_gpus_per_node": WORLD_SIZE,
            "total_training_steps": a.steps,
            "save_freq": a.save_freq,
            "test_freq": a.test_freq,
            "val_before_train": True,
            "resume_mode": a.resume_mode,
            "resume_from_path": a.resume_from_path,
            "default_local_dir": os.path.join(run_dir, "checkpoints"),
        },
        "ray_kwargs": {"ray_init": {"num_cpus": a.num_cpus}, "timeline_json_file": None},
        "scenario": {"name": a.scenario, "fail_step": a.fail_step, "oom_cap_gib": a.oom_cap_gib},
    }
    if not ray.is_initialized():
        # verl/trainer/constants_ppo.py PPO_RAY_RUNTIME_ENV (subset), as get_ppo_ray_runtime_env returns it
        runtime_env = {
            "env_vars": {
                "TOKENIZERS_PARALLELISM": "true",
                "NCCL_DEBUG": "WARN",
                "VLLM_LOGGING_LEVEL": "WARN",
                "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "true",
                "CUDA_DEVICE_MAX_CONNECTIONS": "1",
                "NCCL_CUMEM_ENABLE": "0",
            },
            "working_dir": None,
        }
        ray_init_kwargs = {"num_cpus": a.num_cpus, "runtime_env": runtime_env}
        print(f"ray init kwargs: {ray_init_kwargs}")
        ray.init(**ray_init_kwargs)
    runner = ray.remote(num_cpus=1)(TaskRunner).remote()
    ray.get(runner.run.remote(config))


if __name__ == "__main__":
    main()
