"""MindSpore's compile cache, keyed so that it never hands back a graph built for something else.

Measured traps: a cache built for other shapes or another config is silently reused (NaN or the wrong graph)
and entries are matched by compile order. So the directory is keyed by the model configs, layouts, batch and
length settings, world size and rank, mode, and the mindrl and mindspore versions and source; the trainer
compiles every graph in a fixed order (the roles' ``compile``).
"""
from __future__ import annotations

import hashlib
import json
import os

# Inside functions: MindSpore and the model config, read only when the cache is on


def enable_compile_cache(cfg) -> str:
    """Point MindSpore's compile cache at this config's directory (this process's). The run context calls this
    before it builds the topology, so the place the launcher announced stands for the rank and world."""
    from mindrl.parallel.topology import launch_topology
    from mindrl.runtime import use_compile_cache
    path = compile_cache_dir(cfg, launch_topology())
    use_compile_cache(path)
    return path


def compile_cache_dir(cfg, topo) -> str:
    """The directory of the graphs of ``cfg`` on ``topo``'s rank (a parallel.topology.Topology)."""
    import mindspore
    from mindrl import __version__
    from mindrl.models.config import load_model_config

    def described(path):  # a model config's shapes, and its recompute setting (not an HF field)
        if not path:
            return None
        config = load_model_config(path)
        return {"hf": config.to_hf_dict(), "recompute": config.recompute}
    critic, reward = cfg.critic_config, cfg.reward_config
    keyed = {
        "model": described(cfg.actor_config.model), "ref_model": described(cfg.ref.model),
        "critic_model": described(critic.model) if critic else None,
        "reward_model": described(reward.model or reward.load) if reward else None,
        # every section whose settings shape a graph: the critic's and reward model's layouts and micro-batches too
        "fingerprint": cfg.fingerprint("rl_config", "generate_config", "actor_config.tensor_model_parallel_size",
                                       "actor_config.compute_dtype", "actor_config.lora_rank",
                                       "actor_config.lora_alpha", "actor_config.lora_target_modules",
                                       "actor_config.recompute_granularity", "actor_config.recompute_method",
                                       "actor_config.recompute_num_layers", "actor_config.layer_graphs",
                                       "runtime.mode",
                                       "ref", "critic_config", "reward_config"),
        "world": str(topo.world), "rank": str(topo.rank),
        "mindrl": __version__, "mindspore": mindspore.__version__, "source": source_digest(),
    }
    key = hashlib.sha256(json.dumps(keyed, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return os.path.abspath(os.path.join(cfg.runtime.compile_cache_path, key))


def source_digest() -> str:
    """Hash of mindrl's own source: a code change must not reuse graphs compiled from older code."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    h = hashlib.sha256()
    for dirpath, _, files in sorted(os.walk(root)):
        for f in sorted(files):
            if f.endswith(".py"):
                with open(os.path.join(dirpath, f), "rb") as fh:
                    h.update(f.encode() + fh.read())
    return h.hexdigest()[:16]
