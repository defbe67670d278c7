"""A driver shaped like OpenRLHF's `openrlhf/cli/train_ppo_ray.py` (v0.11.0), run on a real Ray cluster.

No model, no GPU, no DeepSpeed, no vLLM: what is real is Ray (the driver, the `PPOTrainer` single-controller
actor, the `RolloutRayActor` vLLM-engine actor (`LLMRayActor` before v0.10.2, `--names v0.10.1`), the
`PolicyModelActor` group, `CriticModelActor`, `ReferenceModelActor`, `RewardModelActor`, their deaths and
Ray's messages about them) and the shape of what OpenRLHF prints and writes: its logger format
(openrlhf/utils/logging_utils.py), the tqdm bars `Episode [1/1]`, `Generate samples`, `Train epoch [1/1]`
with their postfix keys, the `✨ Global step N: {...}` line, and the DeepSpeed checkpoint layout under
`--ckpt.path` (`_actor/global_stepN/`, `_critic/...`, `latest`, `metric.json`, rotation to `--ckpt.max_num`).
Metric values are made up. See SOURCES.md.

    python openrlhf_shaped.py --ckpt.path DIR --ckpt.output_dir DIR --scenario healthy|actor-sigkill|engine-init-fails
"""

import argparse
import asyncio
import json
import logging
import os
import random
import shutil
import signal
import socket
import sys
import time
from types import SimpleNamespace

import ray
from ray.util.placement_group import placement_group  # noqa: F401  (as train_ppo_ray.py imports it)

# openrlhf/utils/logging_utils.py
_FORMAT = "%(levelname)s %(asctime)s %(filename)s:%(lineno)d] %(message)s"
_DATE_FORMAT = "%m-%d %H:%M:%S"


class NewLineFormatter(logging.Formatter):
    def format(self, record):
        msg = logging.Formatter.format(self, record)
        if record.message != "":
            parts = msg.split(record.message)
            msg = msg.replace("\n", "\r\n" + parts[0])
        return msg


def init_logger(name):
    logger = logging.getLogger(name)
    if not logger.handlers:
        h = logging.StreamHandler(sys.stdout)
        h.setLevel(logging.INFO)
        h.setFormatter(NewLineFormatter(_FORMAT, datefmt=_DATE_FORMAT))
        logger.addHandler(h)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    return logger


def ds_logger():
    """DeepSpeed's logger format (deepspeed/utils/logging.py); its checkpoint-engine messages are logged with it."""
    logger = logging.getLogger("DeepSpeed")
    if not logger.handlers:
        h = logging.StreamHandler(sys.stdout)
        h.setFormatter(
            logging.Formatter("[%(asctime)s] [%(levelname)s] [%(filename)s:%(lineno)d:%(funcName)s] %(message)s")
        )
        logger.addHandler(h)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger


def hierarchize(args):  # openrlhf/utils/config.py
    root = {}
    for k, v in vars(args).items():
        parts = k.split(".")
        node = root
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = v

    def build(x):
        if isinstance(x, dict):
            return SimpleNamespace(**{k: build(v) for k, v in x.items()})
        return x

    return build(root)


class Strategy:
    """Stands for DeepspeedStrategy: print on rank 0, save_ckpt with DeepSpeed's ZeRO-2 file names."""

    def __init__(self, args, rank=0, world_size=1):
        self.args = args
        self.rank = rank
        self.world_size = world_size

    def is_rank_0(self):
        return self.rank == 0

    def print(self, *msg):
        if self.is_rank_0():
            print(*msg)

    def _read_ckpt_metric(self, ckpt_dir):
        p = os.path.join(ckpt_dir, "metric.json")
        if not os.path.exists(p):
            return None
        with open(p) as f:
            v = json.load(f).get("metric_value")
        return None if v is None else float(v)

    def save_ckpt(self, save_dir, tag, max_num, client_state, metric_value=None, metric_key=None):
        # openrlhf/utils/deepspeed/deepspeed.py DeepspeedStrategy.save_ckpt, then model.save_checkpoint
        if self.is_rank_0():
            os.makedirs(save_dir, exist_ok=True)
            while True:
                subdirs = [
                    (os.path.join(save_dir, d), os.path.getmtime(os.path.join(save_dir, d)))
                    for d in os.listdir(save_dir)
                    if os.path.isdir(os.path.join(save_dir, d)) and not d.startswith("best")
                ]
                if max(0, len(subdirs) - max_num + 1) == 0:
                    break
                cands = sorted(
                    [(p, self._read_ckpt_metric(p), m) for p, m in subdirs],
                    key=lambda it: (it[1] is not None, it[1] if it[1] is not None else float("-inf"), it[2]),
                )
                d, metric, _ = cands[0]
                reason = f"metric={metric}" if metric is not None else "no metric (oldest)"
                shutil.rmtree(d)
                self.print(f"Deleted checkpoint {d} ({reason})")
        else:
            # stands for the torch_dist_barrier_and_cuda_sync() before model.save_checkpoint: the other ranks
            # write only after rank 0 has rotated and written the model states
            t0 = time.time()
            while (
                not os.path.exists(os.path.join(save_dir, tag, "mp_rank_00_model_states.pt")) and time.time() - t0 < 30
            ):
                time.sleep(0.05)
        log = ds_logger()
        tag_dir = os.path.join(save_dir, tag)
        os.makedirs(tag_dir, exist_ok=True)
        if self.is_rank_0():
            log.info(f"[Rank 0] [Torch] Checkpoint {tag} is about to be saved!")
            p = os.path.join(tag_dir, "mp_rank_00_model_states.pt")
            log.info(f"[Torch] Saving {p}...")
            with open(p, "w") as f:
                f.write(f"stub module states + client_state {json.dumps(client_state, sort_keys=True)}\n")
            log.info(f"[Torch] Saved {p}.")
        p = os.path.join(tag_dir, f"bf16_zero_pp_rank_{self.rank}_mp_rank_00_optim_states.pt")
        log.info(f"[Torch] Saving {p}...")
        with open(p, "w") as f:
            f.write(f"stub zero-2 optimizer partition, dp rank {self.rank}\n")
        log.info(f"[Torch] Saved {p}.")
        if self.is_rank_0():
            with open(os.path.join(save_dir, "latest"), "w") as f:
                f.write(tag)
            with open(os.path.join(save_dir, "zero_to_fp32.py"), "w") as f:
                f.write("# stub: DeepSpeed copies its zero_to_fp32.py recovery script here\n")
            with open(os.path.join(tag_dir, "metric.json"), "w") as f:
                json.dump({"metric_key": metric_key, "metric_value": metric_value}, f, indent=2, sort_keys=True)
            log.info(f"[Torch] Checkpoint {tag} is ready now!")

    def save_model(self, output_dir):
        if self.is_rank_0():
            os.makedirs(output_dir, exist_ok=True)
            for name, text in (
                ("config.json", '{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}\n'),
                ("generation_config.json", '{"eos_token_id": 151643}\n'),
                ("model.safetensors", "stub\n"),
                ("tokenizer_config.json", '{"model_max_length": 131072}\n'),
            ):
                with open(os.path.join(output_dir, name), "w") as f:
                    f.write(text)


def scenario_of(args):
    return args.scenario, args.fail_step


# ---------------------------------------------------------------- vLLM engine actor


class _RolloutEngine:
    """Stands for OpenRLHF's vLLM engine actor (an async actor: `async def __init__`)."""

    async def __init__(self, seed, scenario, fail_step):
        self.seed = seed
        self.rng = random.Random(seed)
        self.scenario = scenario
        self.fail_step = fail_step
        if scenario == "engine-init-fails":
            raise RuntimeError(
                "injected failure in vLLM engine __init__ (stands for e.g. vLLM's "
                "'No available memory for the cache blocks')"
            )
        await asyncio.sleep(0.2)

    async def init_process_group(self, master_address, master_port, rank_offset, world_size, group_name, backend):
        return True

    async def update_weight(self, name, dtype, shape, empty_cache=False):
        await asyncio.sleep(0.01)
        return True

    async def generate_responses(self, prompt_ids, labels):
        await asyncio.sleep(0.1)
        out = []
        for p, lab in zip(prompt_ids, labels, strict=True):
            n = self.rng.randint(40, 512)
            out.append({"prompt": p, "label": lab, "response_length": n, "truncated": n >= 512})
        return out


# v0.11.0 name, and the name before the rename (v0.10.1 and older)
RolloutRayActor = ray.remote(type("RolloutRayActor", (_RolloutEngine,), {}))
LLMRayActor = ray.remote(type("LLMRayActor", (_RolloutEngine,), {}))


# ---------------------------------------------------------------- model actors (openrlhf/trainer/ray/launcher.py)


class BaseDistributedActor:
    def __init__(self, world_size, rank, master_addr, master_port):
        logging.basicConfig(
            format="%(asctime)s %(levelname)-8s %(message)s", level=logging.INFO, datefmt="%Y-%m-%d %H:%M:%S"
        )
        self._world_size = world_size
        self._rank = rank
        self._master_addr = master_addr if master_addr else ray.util.get_node_ip_address()
        self._master_port = master_port if master_port else self._get_free_port()
        os.environ["MASTER_ADDR"] = self._master_addr
        os.environ["MASTER_PORT"] = str(self._master_port)
        os.environ["WORLD_SIZE"] = str(self._world_size)
        os.environ["RANK"] = str(self._rank)
        os.environ["LOCAL_RANK"] = "0"

    @staticmethod
    def _get_free_port():
        with socket.socket() as sock:
            sock.bind(("", 0))
            return sock.getsockname()[1]

    def get_master_addr_port(self):
        return self._master_addr, self._master_port


class BaseModelActor(BaseDistributedActor):
    def _setup_distributed(self, strategy):
        self.strategy = Strategy(strategy.args, rank=self._rank, world_size=self._world_size)
        self.rng = random.Random(100 + self._rank)

    def empty_cache(self):
        pass


class _ReferenceModel(BaseModelActor):
    def init_model_from_pretrained(self, strategy, pretrain):
        self._setup_distributed(strategy)
        time.sleep(0.3)

    def forward(self, n):
        time.sleep(0.1)
        return [self.rng.uniform(-2.0, -0.5) for _ in range(n)]


class _RewardModel(BaseModelActor):
    def init_model_from_pretrained(self, strategy, pretrain):
        self._setup_distributed(strategy)
        self.strategy.print(f"reward normalization status: {False}")
        self.strategy.print(f"mean: {0.0}, std {1.0}")
        time.sleep(0.3)

    def forward(self, n, step):
        time.sleep(0.1)
        return [1.0 if self.rng.random() < 0.3 + 0.04 * step else 0.0 for _ in range(n)]


class _PolicyModel(BaseModelActor):
    def init_model_from_pretrained(self, strategy, pretrain, max_steps=None, vllm_engines=None):
        self._setup_distributed(strategy)
        args = strategy.args
        self.vllm_engines = vllm_engines
        self.step = 0
        ckpt_path = os.path.join(args.ckpt.path, "_actor")
        self.checkpoint_states = {}
        if args.ckpt.load_enable and os.path.exists(ckpt_path):
            self.strategy.print(f"Loading the checkpoint: {ckpt_path}")
            latest = os.path.join(ckpt_path, "latest")
            if os.path.exists(latest):
                with open(latest) as f:
                    tag = f.read().strip()
                self.checkpoint_states = {
                    "global_step": int(tag.replace("global_step", "")),
                    "episode": 0,
                    "total_consumed_prompts": 0,
                    "data_loader_state_dict": {},
                }
        time.sleep(0.3)
        if vllm_engines is not None and self.strategy.is_rank_0():
            # ActorPPOTrainer._init_vllm_sync_group: rank 0 joins every engine's weight-sync group
            ray.get([e.init_process_group.remote("127.0.0.1", 29500, 1, 2, "openrlhf", "gloo") for e in vllm_engines])

    def append(self, n):
        self.n = n

    def fit(self, kl_ctl=0.0, scenario=None, fail_step=None, global_step=None):
        from tqdm import tqdm

        if scenario == "actor-sigkill" and global_step == fail_step and self._rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        r = self.rng
        status_list = []
        pbar = tqdm(range(4), desc="Train epoch [1/1]", disable=not self.strategy.is_rank_0())
        for _ in pbar:
            time.sleep(0.25)
            merged = {
                "policy_loss": r.uniform(-0.05, 0.05),
                "actor_lr": 5e-07,
                "actor_grad_norm": r.uniform(0.05, 0.4),
                "reward": r.uniform(0.2, 0.6),
                "return": r.uniform(0.2, 0.6),
                "response_length": r.uniform(150, 400),
                "total_length": r.uniform(300, 600),
                "kl": r.uniform(0.0, 0.01),
                "logprobs_diff": r.uniform(0.0, 0.02),
                "ppo_clip_ratio": r.uniform(0.0, 0.01),
                "ppo_kl": r.uniform(-1e-4, 1e-4),
            }
            short_status = {
                "act_loss": merged["policy_loss"],
                "reward": merged.get("reward", 0),
                "return": merged.get("return", 0),
                "gen_len": merged.get("response_length", 0),
                "tot_len": merged.get("total_length", 0),
                "kl": merged.get("kl", 0),
                "act_lr": merged["actor_lr"],
                "grad_norm": merged.get("actor_grad_norm", 0),
            }
            status_list.append(merged)
            pbar.set_postfix(short_status)
        status_mean = {}
        for k in set().union(*(s.keys() for s in status_list)):  # set order, as ActorPPOTrainer.ppo_train
            vals = [s[k] for s in status_list]
            status_mean[k] = vals[-1] if k in ("actor_grad_norm", "actor_lr") else sum(vals) / len(vals)
        return status_mean

    def broadcast_to_vllm(self):
        if self.strategy.is_rank_0() and self.vllm_engines:
            ray.get(
                [
                    e.update_weight.remote("model.embed_tokens.weight", "bfloat16", [151936, 896])
                    for e in self.vllm_engines
                ]
            )

    def get_checkpoint_states(self):
        return self.checkpoint_states

    def save_checkpoint(self, tag, client_states=None, metric_value=None, metric_key=None):
        args = self.strategy.args
        self.strategy.save_ckpt(
            os.path.join(args.ckpt.path, "_actor"),
            tag,
            args.ckpt.max_num,
            client_states or {},
            metric_value=metric_value,
            metric_key=metric_key,
        )

    def save_model(self):
        self.strategy.save_model(self.strategy.args.ckpt.output_dir)


class _CriticModel(BaseModelActor):
    def init_model_from_pretrained(self, strategy, pretrain, max_steps):
        self._setup_distributed(strategy)
        time.sleep(0.3)

    def forward(self, n):
        time.sleep(0.1)
        return [self.rng.uniform(-0.5, 0.5) for _ in range(n)]

    def append(self, n):
        self.n = n

    def fit(self):
        from tqdm import tqdm

        r = self.rng
        status_list = []
        pbar = tqdm(range(4), desc="Train epoch [1/1]", disable=not self.strategy.is_rank_0())
        for _ in pbar:
            time.sleep(0.2)
            status = {
                "critic_loss": r.uniform(0.01, 0.2),
                "values": r.uniform(-0.3, 0.3),
                "critic_lr": 9e-06,
                "critic_grad_norm": r.uniform(0.5, 3.0),
            }
            status_list.append(status)
            pbar.set_postfix(status)
        mean = dict(status_list[0])
        for m in status_list[1:]:
            for k, v in m.items():
                mean[k] += v
        return {k: v / len(status_list) for k, v in mean.items()}

    def save_checkpoint(self, tag, metric_value=None, metric_key=None):
        args = self.strategy.args
        self.strategy.save_ckpt(
            os.path.join(args.ckpt.path, "_critic"),
            tag,
            args.ckpt.max_num,
            {},
            metric_value=metric_value,
            metric_key=metric_key,
        )


ReferenceModelActor = ray.remote(type("ReferenceModelActor", (_ReferenceModel,), {}))
RewardModelActor = ray.remote(type("RewardModelActor", (_RewardModel,), {}))
PolicyModelActor = ray.remote(type("PolicyModelActor", (_PolicyModel,), {}))
CriticModelActor = ray.remote(type("CriticModelActor", (_CriticModel,), {}))


class RayActorGroup:
    def __init__(self, num_nodes, num_gpus_per_node, ray_actor_type, resources=None):
        world_size = num_nodes * num_gpus_per_node
        master = ray_actor_type.options(num_cpus=1, resources=(resources or {}).get(0)).remote(
            world_size, 0, None, None
        )
        self._actor_handlers = [master]
        if world_size > 1:
            master_addr, master_port = ray.get(master.get_master_addr_port.remote())
            for rank in range(1, world_size):
                self._actor_handlers.append(
                    ray_actor_type.options(num_cpus=1, resources=(resources or {}).get(rank)).remote(
                        world_size, rank, master_addr, master_port
                    )
                )

    def async_init_model_from_pretrained(self, *args, **kwargs):
        return [a.init_model_from_pretrained.remote(*args, **kwargs) for a in self._actor_handlers]

    def async_save_model(self):
        return [a.save_model.remote() for a in self._actor_handlers]

    def async_run_method(self, method_name, *args, **kwargs):
        return [getattr(a, method_name).remote(*args, **kwargs) for a in self._actor_handlers]


# ---------------------------------------------------------------- single controller (openrlhf/trainer/ppo_trainer.py)

logger = init_logger(__name__)


@ray.remote
class PPOTrainer:
    def __init__(
        self,
        pretrain,
        strategy,
        actor_model_group,
        critic_model_group,
        reward_model_group,
        reference_model_group,
        vllm_engines,
        **generate_kwargs,
    ):
        global logger
        logger = init_logger("openrlhf.trainer.ppo_trainer")
        self.args = strategy.args
        self.strategy = strategy
        self.actor_model_group = actor_model_group
        self.critic_model_group = critic_model_group
        self.reward_model_group = reward_model_group
        self.reference_model_group = reference_model_group
        self.vllm_engines = vllm_engines
        self.generate_kwargs = generate_kwargs
        self.num_prompts = self.args.data.max_samples
        self.max_steps = self.num_prompts * self.args.rollout.n_samples_per_prompt // self.args.train.batch_size
        self.rng = random.Random(11)

    def get_max_steps(self):
        return self.max_steps

    def init_checkpoint_states(self):
        ckpt_path = os.path.join(self.args.ckpt.path, "_actor")
        if self.args.ckpt.load_enable and os.path.exists(ckpt_path):
            checkpoint_states = ray.get(self.actor_model_group.async_run_method(method_name="get_checkpoint_states"))[0]
            logger.info(f"checkpoint_states: {checkpoint_states}")
            return checkpoint_states
        return {"episode": 0, "global_step": 0, "total_consumed_prompts": 0, "data_loader_state_dict": {}}

    def _generate(self, step, consumed):
        from tqdm import tqdm

        bs = self.args.rollout.batch_size
        prompts = [f"prompt-{consumed + i}" for i in range(bs)]
        refs = [
            self.vllm_engines[i % len(self.vllm_engines)].generate_responses.remote([p], ["5"])
            for i, p in enumerate(prompts)
        ]
        pbar = tqdm(range(bs), desc="Generate samples")
        out = []
        pending = refs
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=10.0)
            for ref in ready:
                out.extend(ray.get(ref))
                pbar.set_postfix({"prompts_consumed": bs})
                pbar.update()
        return out, bs

    def broadcast_to_vllm(self):
        ray.get(self.actor_model_group.async_run_method(method_name="broadcast_to_vllm"))

    def fit(self, global_step: int = 0):
        from tqdm import tqdm

        a = self.args
        checkpoint_states = self.init_checkpoint_states()
        if checkpoint_states["global_step"] > 0:
            global_step = checkpoint_states["global_step"]
        total_consumed_prompts = global_step * a.rollout.batch_size
        if global_step:
            self.broadcast_to_vllm()
        for episode in range(0, a.train.num_episodes):
            dataset_length = self.num_prompts
            pbar = tqdm(
                range(dataset_length),
                desc=f"Episode [{episode + 1}/{a.train.num_episodes}]",
                initial=total_consumed_prompts % max(dataset_length, 1),
            )
            while total_consumed_prompts < dataset_length:
                t_gen = time.time()
                samples, prompts_consumed = self._generate(global_step + 1, total_consumed_prompts)
                generation_time = time.time() - t_gen
                total_consumed_prompts += prompts_consumed
                # train_step
                t0 = time.time()
                n = len(samples)
                rewards = ray.get(self.reward_model_group.async_run_method("forward", n, global_step + 1))[0]
                ray.get(self.reference_model_group.async_run_method("forward", n))
                ray.get(self.critic_model_group.async_run_method("forward", n))
                make_experience_time = time.time() - t0
                sample0 = [f"What is 2 + 3? Answer: {prompts_consumed - 3}", rewards[0]]
                logger.info(f"Sample: {sample0}")
                ray.get(
                    self.actor_model_group.async_run_method("append", n)
                    + self.critic_model_group.async_run_method("append", n)
                )
                t0 = time.time()
                status = {}
                refs = self.critic_model_group.async_run_method(method_name="fit")
                refs += self.actor_model_group.async_run_method(
                    method_name="fit",
                    kl_ctl=0.01,
                    scenario=a.scenario,
                    fail_step=a.fail_step,
                    global_step=global_step + 1,
                )
                for result in ray.get(refs):
                    status.update(result)
                ppo_train_time = time.time() - t0
                t0 = time.time()
                self.broadcast_to_vllm()
                broadcast_time = time.time() - t0
                global_step += 1
                status["timing/make_experience"] = make_experience_time
                status["timing/ppo_train"] = ppo_train_time
                status["timing/broadcast"] = broadcast_time
                lens = [s["response_length"] for s in samples]
                status.update(
                    {
                        "rollout/reward_mean": sum(rewards) / n,
                        "rollout/reward_std": (sum((x - sum(rewards) / n) ** 2 for x in rewards) / (n - 1)) ** 0.5,
                        "rollout/response_length_mean": sum(lens) / n,
                        "rollout/truncated_rate": sum(1 for s in samples if s["truncated"]) / n,
                        "rollout/num_samples": float(n),
                    }
                )
                status["generated_samples"] = sample0
                status["timing/generation"] = generation_time
                status["timing/step_total"] = sum(v for k, v in status.items() if k.startswith("timing/"))
                log_status = {k: v for k, v in status.items() if k not in ["generated_samples"]}
                logger.info(f"✨ Global step {global_step}: {log_status}")
                client_states = {
                    "episode": episode,
                    "global_step": global_step,
                    "total_consumed_prompts": total_consumed_prompts,
                    "data_loader_state_dict": {},
                }
                if a.ckpt.save_steps > 0 and global_step % a.ckpt.save_steps == 0:
                    tag = f"global_step{global_step}"
                    refs = self.actor_model_group.async_run_method(
                        method_name="save_checkpoint",
                        tag=tag,
                        client_states=client_states,
                        metric_value=None,
                        metric_key=None,
                    )
                    refs.extend(
                        self.critic_model_group.async_run_method(
                            method_name="save_checkpoint", tag=tag, metric_value=None, metric_key=None
                        )
                    )
                    ray.get(refs)
                pbar.update(prompts_consumed)


# ---------------------------------------------------------------- driver (openrlhf/cli/train_ppo_ray.py)


def train(args):
    if not ray.is_initialized():
        ray.init(
            runtime_env={
                "env_vars": {
                    "TOKENIZERS_PARALLELISM": os.environ.get("TOKENIZERS_PARALLELISM", "true"),
                    "NCCL_DEBUG": os.environ.get("NCCL_DEBUG", "WARN"),
                    "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS": os.environ.get("RAY_ENABLE_ZERO_COPY_TORCH_TENSORS", "1"),
                }
            }
        )
    strategy = Strategy(args)
    strategy.print(args)

    node2 = {"node2": 0.01} if args.place_on_node2 else None
    engine_cls = LLMRayActor if args.names == "v0.10.1" else RolloutRayActor
    vllm_engines = [
        engine_cls.options(num_cpus=1, resources=node2).remote(args.train.seed + i, args.scenario, args.fail_step)
        for i in range(args.vllm.num_engines)
    ]
    actor_model = RayActorGroup(
        args.actor.num_nodes, args.actor.num_gpus_per_node, PolicyModelActor, resources={1: node2} if node2 else None
    )
    ref_model = RayActorGroup(args.ref.num_nodes, args.ref.num_gpus_per_node, ReferenceModelActor)
    critic_model = RayActorGroup(args.critic.num_nodes, args.critic.num_gpus_per_node, CriticModelActor)
    reward_model = RayActorGroup(args.reward.num_nodes, args.reward.num_gpus_per_node, RewardModelActor)

    ppo_trainer = PPOTrainer.remote(
        args.actor.model_name_or_path,
        strategy,
        actor_model,
        critic_model,
        reward_model,
        ref_model,
        vllm_engines,
        do_sample=True,
        max_len=args.data.max_len,
        max_new_tokens=args.rollout.max_new_tokens,
        temperature=args.rollout.temperature,
        top_p=args.rollout.top_p,
    )
    max_steps = ray.get(ppo_trainer.get_max_steps.remote())
    refs = []
    refs.extend(
        actor_model.async_init_model_from_pretrained(strategy, args.actor.model_name_or_path, max_steps, vllm_engines)
    )
    refs.extend(ref_model.async_init_model_from_pretrained(strategy, args.actor.model_name_or_path))
    refs.extend(reward_model.async_init_model_from_pretrained(strategy, args.reward.model_name_or_path))
    ray.get(refs)
    refs = critic_model.async_init_model_from_pretrained(strategy, args.critic.model_name_or_path, max_steps)
    ray.get(refs)

    ray.get(ppo_trainer.fit.remote())
    ray.get(actor_model.async_save_model())


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    for role in ("ref", "reward", "critic", "actor"):
        parser.add_argument(f"--{role}.num_nodes", type=int, default=1)
        parser.add_argument(f"--{role}.num_gpus_per_node", type=int, default=2 if role == "actor" else 1)
    parser.add_argument("--vllm.num_engines", type=int, default=1)
    parser.add_argument("--vllm.tensor_parallel_size", type=int, default=1)
    parser.add_argument("--actor.model_name_or_path", default="OpenRLHF/Llama-3-8b-sft-mixture")
    parser.add_argument("--reward.model_name_or_path", default="OpenRLHF/Llama-3-8b-rm-700k")
    parser.add_argument("--critic.model_name_or_path", default="OpenRLHF/Llama-3-8b-rm-700k")
    parser.add_argument("--ckpt.path", default="./ckpt/checkpoints_ppo_ray")
    parser.add_argument("--ckpt.output_dir", default="./ckpt")
    parser.add_argument("--ckpt.save_steps", type=int, default=-1)
    parser.add_argument("--ckpt.max_num", type=int, default=3)
    parser.add_argument("--ckpt.load_enable", action="store_true", default=False)
    parser.add_argument("--logger.logging_steps", type=int, default=1)
    parser.add_argument("--train.num_episodes", type=int, default=1)
    parser.add_argument("--train.max_epochs", type=int, default=1)
    parser.add_argument("--train.batch_size", type=int, default=8)
    parser.add_argument("--train.seed", type=int, default=42)
    parser.add_argument("--rollout.batch_size", type=int, default=8)
    parser.add_argument("--rollout.n_samples_per_prompt", type=int, default=1)
    parser.add_argument("--rollout.max_new_tokens", type=int, default=1024)
    parser.add_argument("--rollout.temperature", type=float, default=1.0)
    parser.add_argument("--rollout.top_p", type=float, default=1.0)
    parser.add_argument("--data.max_len", type=int, default=2048)
    parser.add_argument("--data.max_samples", type=int, default=64)
    parser.add_argument("--ds.zero_stage", type=int, default=2)
    parser.add_argument("--ds.param_dtype", default="bf16")
    # not OpenRLHF's: the fixture's scenario switches
    parser.add_argument("--scenario", default="healthy", choices=["healthy", "actor-sigkill", "engine-init-fails"])
    parser.add_argument("--fail_step", type=int, default=4)
    parser.add_argument("--names", default="v0.11.0", choices=["v0.11.0", "v0.10.1"])
    parser.add_argument(
        "--place_on_node2", action="store_true", help="engine + actor rank 1 on the node with resource node2"
    )
    args = hierarchize(parser.parse_args())
    if args.ckpt.save_steps == -1:
        args.ckpt.save_steps = 0
    train(args)
