"""The run's context: what every role and stage reads, built once, before any network.

It turns the config into plain facts (layouts, the tokenizer, the model config, sampling parameters) so that the
roles below never read environment variables and the algorithm code never reads the config.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from mindrl.config import ConfigError, TrainConfig
from mindrl.parallel.exchange import Exchange
from mindrl.parallel.topology import Topology, build_topology


def seed_from(*parts) -> int:
    """A 32-bit seed from integers (run seed, step, draw, replica, ...): independent streams per purpose."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0])


def bucket(n: int, minimum: int = 8) -> int:
    """The padded width a batch of longest row ``n`` is compiled for: a power of two from ``minimum`` up."""
    b = minimum
    while b < n:
        b *= 2
    return b


def _set_up_run_dir(cfg: TrainConfig, is_main: bool, exchange) -> None:
    """This run's directory (trainer/run_dir.py), and the checkpoint paths that live inside it."""
    from mindrl.trainer.run_dir import expand_run_dir, set_up_run_dir
    actor = cfg.actor_config
    run_dir = set_up_run_dir(cfg.logging, is_main, exchange, load=actor.load, resuming=not actor.finetune,
                             checkpoints=actor.save)
    for section in (actor, cfg.critic_config):
        if section is not None:
            section.save = expand_run_dir(section.save, run_dir)


@dataclass
class RunContext:
    cfg: TrainConfig
    topo: Topology
    exchange: Exchange
    tokenizer: object
    model_config: object
    pad_id: int
    static_shapes: bool     # fixed graph shapes and compile order (compile cache, strategy export)

    @classmethod
    def create(cls, cfg: TrainConfig, run_dir: bool = True) -> "RunContext":
        """``run_dir``: claim this run's directory (logging.log_dir) and put it into the checkpoint paths; off for
        work that writes no run (``mindrl evaluate``, ``export-strategy``)."""
        from mindrl.data.tokenizer import load_tokenizer
        from mindrl.models.config import load_model_config
        from mindrl.runtime import setup_context
        rt, actor, gen, rl = cfg.runtime, cfg.actor_config, cfg.generate_config, cfg.rl_config
        static = bool(rt.enable_compile_cache or rt.only_save_strategy)
        if rt.enable_compile_cache:
            from mindrl.trainer.compile_cache import enable_compile_cache
            enable_compile_cache(cfg)
        setup_context(rt.mode, rt.threads)
        stages = {"train": (actor.tensor_model_parallel_size, None, "actor_config.tensor_model_parallel_size"),
                  "infer": (gen.infer_tensor_parallel_size, gen.infer_data_parallel_size,
                            "generate_config.infer_tensor_parallel_size")}
        if cfg.critic_config is not None:
            stages["critic"] = (cfg.critic_config.tensor_model_parallel_size, None,
                                "critic_config.tensor_model_parallel_size")
        if cfg.reward_config is not None:
            stages["reward"] = (cfg.reward_config.tensor_model_parallel_size, None,
                                "reward_config.tensor_model_parallel_size")
        try:
            topo = build_topology(stages)
        except ValueError as err:  # a tp size that does not divide the world: the config's
            raise ConfigError(str(err)) from None
        if rl.global_batch_size % topo.infer.dp:
            raise ConfigError(f"rl_config.global_batch_size={rl.global_batch_size} is not divisible by the rollout's "
                             f"data parallel size {topo.infer.dp} (world {topo.world} / infer tp {topo.infer.tp})")
        if rl.mini_batch_size % (topo.train.dp * rl.micro_batch_size):
            raise ConfigError(f"rl_config.mini_batch_size={rl.mini_batch_size} must split into train data parallel "
                             f"size {topo.train.dp} x micro_batch_size {rl.micro_batch_size}")
        if cfg.critic_config is not None and rl.mini_batch_size % (topo["critic"].dp * cfg.critic_config.micro_batch_size):
            raise ConfigError(f"rl_config.mini_batch_size={rl.mini_batch_size} must split into the critic's data "
                             f"parallel size {topo['critic'].dp} x critic_config.micro_batch_size "
                             f"{cfg.critic_config.micro_batch_size}")
        if rl.pretrain_coef > 0:
            from mindrl.trainer.ptx import ptx_chunks
            chunk = rl.global_batch_size // ptx_chunks(rl)
            if chunk % topo.train.dp or chunk // topo.train.dp % min(rl.micro_batch_size, chunk // topo.train.dp):
                raise ConfigError(f"rl_config.pretrain_coef: PPO-ptx's {chunk} SFT rows per mini-batch do not split "
                                 f"into train data parallel size {topo.train.dp} x micro-batches of "
                                 f"rl_config.micro_batch_size {rl.micro_batch_size}")
        exchange = Exchange(topo.world)
        if run_dir:
            _set_up_run_dir(cfg, topo.is_main, exchange)
        tokenizer = load_tokenizer(actor.tokenizer_name_or_path)
        model_config = load_model_config(actor.model)
        if actor.compute_dtype:
            model_config = model_config.replace(compute_dtype=actor.compute_dtype)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        return cls(cfg, topo, exchange, tokenizer, model_config, pad_id, static)

    @property
    def seed(self) -> int:
        return self.cfg.runtime.seed

    @property
    def tokenizer_dir(self) -> str:
        path = self.cfg.actor_config.tokenizer_name_or_path
        return path if os.path.isdir(path) else os.path.dirname(path)

    def sampling_params(self):
        from mindrl.rollout.sampling import SamplingParams
        gen, rl = self.cfg.generate_config, self.cfg.rl_config
        stops = list(gen.stop_token_ids)
        if self.tokenizer.eos_token_id is not None:
            stops.append(self.tokenizer.eos_token_id)
        stops += self.model_config.eos_token_ids
        return SamplingParams(n=rl.n_samples_per_prompt, max_tokens=gen.max_tokens, min_tokens=gen.min_tokens,
                              do_sample=True, temperature=gen.temperature, top_k=gen.top_k, top_p=gen.top_p,
                              repetition_penalty=gen.repetition_penalty,
                              stop_token_ids=sorted(set(stops))).validate()

    def static_widths(self) -> tuple:
        """(prompt width, response width) of the widest batch: the buckets of the configured maxima."""
        gen = self.cfg.generate_config
        return bucket(gen.max_prompt_length), bucket(gen.max_tokens, 4)

    def train_widths(self, exp) -> tuple:
        """(prompt width, response width) the training graphs run at for ``exp``: fixed buckets of the configured
        maxima with static shapes, else the smallest buckets that hold the batch."""
        if self.static_shapes:
            return self.static_widths()
        longest_p, longest_r = exp.widths_needed()
        return bucket(longest_p), bucket(longest_r, 4)
