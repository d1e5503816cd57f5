"""Checks that read the files a config names, before MindSpore builds or compiles anything.

The config loader checks keys and that files exist; these checks open them (model configs, safetensors
headers, tokenizer files) to refuse runs that would fail late or silently: a reward model without a score head,
a critic or reward model whose vocabulary is not the policy's, checkpoints whose shapes do not fit their config.
Every problem is one line ``<config file>: <key>: <what is wrong>``, raised together as a ConfigError.
"""
from __future__ import annotations

import os
from typing import List

from mindrl.config import ConfigError


def _head_model_tensors(config) -> dict:
    """Name -> shape of a sequence-classification model (value or reward): the backbone and a [1, hidden] head."""
    from mindrl.models.convert import expected_tensors
    out = {k: v for k, v in expected_tensors(config).items() if k != "lm_head.weight"}
    out["score.weight"] = (1, config.hidden_size)
    return out


def _check_shapes(lines: List[str], key: str, path: str, want: dict, need_head: bool, role: str = "policy") -> None:
    from mindrl.models.safetensors_io import CheckpointError
    from mindrl.models.weights import TensorSource, weights_path
    if os.path.isfile(path) and path.endswith(".ckpt"):
        return  # a MindSpore .ckpt is read only by MindSpore; load_into checks it while loading
    try:
        src = TensorSource(weights_path(path, role))
    except CheckpointError as err:
        lines.append(f"{key}: {err}")
        return
    if need_head and "score.weight" not in src:
        lines.append(f"{key}: {src.path} has no score head (score.weight): a reward model is a sequence-"
                     f"classification checkpoint, e.g. one written by `mindrl train-rm`, not a causal LM")
        return
    for name, shape in want.items():
        if name == "score.weight" and name not in src:
            continue
        if name not in src:
            lines.append(f"{key}: {src.path} lacks tensor {name!r} that its model config needs")
            return
        if tuple(src.shape(name)) != tuple(shape):
            lines.append(f"{key}: {src.path}: tensor {name!r} has shape {list(src.shape(name))}, the model "
                         f"config says {list(shape)}")
            return


def preflight(cfg, source: str = "<config>") -> None:
    """Raise ConfigError naming the key and file of everything found wrong."""
    from mindrl.models.config import ModelConfigError, load_model_config
    lines: List[str] = []

    def model(key, path):
        try:
            return load_model_config(path)
        except ModelConfigError as err:
            lines.append(f"{key}: {err}")
            return None

    policy = model("actor_config.model", cfg.actor_config.model)
    rm, critic = cfg.reward_config, cfg.critic_config
    if rm is not None:
        rm_model = model("reward_config.model", rm.model) if rm.model else None
        if rm.model is None:
            lines.append(f"reward_config.model: {rm.load!r} has no config.json; give the architecture")
        if rm_model is not None and policy is not None and rm_model.vocab_size != policy.vocab_size:
            lines.append(f"reward_config.model: vocab_size {rm_model.vocab_size} is not the policy's "
                         f"{policy.vocab_size}: the reward model reads the policy's token ids")
        if rm_model is not None:
            _check_shapes(lines, "reward_config.load", rm.load, _head_model_tensors(rm_model), need_head=True)
        if rm.normalize:
            from mindrl.trainer.roles.reward_model import reward_statistics
            if reward_statistics(rm.load) is None:
                lines.append(f"reward_config.normalize: {rm.load!r} stores no reward mean/std in its config.json "
                             f"(`mindrl train-rm` writes them); set normalize: false")
    if critic is not None:
        critic_model = model("critic_config.model", critic.model)
        if critic_model is not None and policy is not None and critic_model.vocab_size != policy.vocab_size:
            lines.append(f"critic_config.model: vocab_size {critic_model.vocab_size} is not the policy's "
                         f"{policy.vocab_size}: the critic reads the policy's token ids")
        if critic_model is not None and critic.load is not None:
            _check_shapes(lines, "critic_config.load", critic.load, _head_model_tensors(critic_model), need_head=False,
                          role="critic")
    ptx = cfg.data.ptx_path if cfg.rl_config.pretrain_coef > 0 else None
    if ptx is not None:
        from mindrl.data.reader import mindrecord_columns
        from mindrl.trainer.ptx import PTX_COLUMNS
        missing = [c for c in PTX_COLUMNS if c not in mindrecord_columns(ptx)]
        if missing:
            key = "data.ptx_path" if "data.ptx_path" in getattr(cfg, "_explicit", ()) else "rl_config.pretrain_coef"
            lines.append(f"{key}: {ptx!r} has no {' or '.join(missing)} column: PPO-ptx trains on SFT rows "
                         f"(`mindrl preprocess` with handler_name sft, or rlhf_data.py); set data.ptx_path to such a "
                         f"file")
    if lines:
        lines = [f"{source}: {line}" for line in lines]
        raise ConfigError("\n".join(lines), lines)
