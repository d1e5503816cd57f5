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


def enable_compile_cache(cfg) -> str:
    import mindspore
    from mindrl import __version__
    from mindrl.models.config import load_model_config
    keyed = {
        "model": load_model_config(cfg.actor_config.model).to_hf_dict(),
        "ref_model": load_model_config(cfg.ref.model).to_hf_dict() if cfg.ref.model else None,
        "fingerprint": cfg.fingerprint("rl_config", "generate_config", "actor_config.tensor_model_parallel_size",
                                       "actor_config.compute_dtype", "runtime.mode", "ref"),
        "world": os.environ.get("MS_WORKER_NUM", "1"), "rank": os.environ.get("RANK_ID", "0"),
        "mindrl": __version__, "mindspore": mindspore.__version__, "source": source_digest(),
    }
    key = hashlib.sha256(json.dumps(keyed, sort_keys=True, default=str).encode()).hexdigest()[:16]
    path = os.path.abspath(os.path.join(cfg.runtime.compile_cache_path, key))
    os.makedirs(path, exist_ok=True)
    os.environ["MS_COMPILER_CACHE_ENABLE"] = "1"
    os.environ["MS_COMPILER_CACHE_PATH"] = path
    return path


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
