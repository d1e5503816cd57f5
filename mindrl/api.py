"""The Python API, for people who come from TRL::

    from mindrl import GRPOTrainer, load_config

    def brevity(response: str, label: str) -> float:
        return 1.0 if len(response) < 40 else 0.0

    cfg = load_config("examples/grpo/tiny_math.yaml", ["rl_config.train_iters=5"])
    trainer = GRPOTrainer(cfg, reward_funcs=[brevity])   # brevity joins the config's last_number, weight 1.0
    summary = trainer.fit()                 # the same run `mindrl train` makes: run directory, metrics, report
    trainer.evaluate()                      # {"eval/score/mean": ...} on eval.path

``GRPOTrainer(config, reward_funcs=..., overrides=...)`` also takes the yaml path or a dict of sections directly,
and ``load_config(..., reward_funcs=...)`` adds them at load time (so ``verifier_function`` may name them and give
their weights). A reward function is ``f(response_text, label) -> float``, called per sample under
``rl_config.verifier_timeout`` like every reward. Functions that ``rl_config.verifier_function`` does not name are added to it with weight 1.0
(and, as in TRL, they are the whole reward when the config names no verifier). The estimator is the config's
``rl_config.adv_estimator``: ``PPOTrainer`` is the same class, for a config with ``adv_estimator: gae`` and a
``critic_config`` section.
"""
from __future__ import annotations

import copy
import os
from typing import Callable, Optional, Sequence, Union

from mindrl.config import TrainConfig, load_train_config, raw_train_config, train_config_from_dict
from mindrl.rewards.custom import register_reward_funcs
from mindrl.trainer.loop import RLTrainer

RewardFunc = Callable[[str, str], float]


def load_config(config: Union[str, os.PathLike, dict], overrides: Sequence[str] = (),
                reward_funcs: Optional[Sequence[RewardFunc]] = None) -> TrainConfig:
    """A validated training config from a yaml path or a dict of sections, with ``key=value`` overrides.

    ``reward_funcs`` are registered first (so ``verifier_function`` may name them) and those it does not name
    are appended with weight 1.0. Raises ``mindrl.config.ConfigError`` naming the key of every problem."""
    names = register_reward_funcs(reward_funcs)
    overrides = list(overrides)
    if names:
        overrides = _with_reward_funcs(config, overrides, names)
    if isinstance(config, dict):
        return train_config_from_dict(config, overrides, name=config.get("logging", {}).get("name") or "run")
    return load_train_config(config, overrides)


def _add_names(verifiers: list, weights: list, names: list) -> tuple:
    """``verifier_function`` and ``verifier_weight`` with the functions not named yet appended at weight 1.0."""
    verifiers, weights = list(verifiers), list(weights or [1.0] * len(verifiers))
    for name in names:
        if name not in verifiers:
            verifiers.append(name)
            weights.append(1.0)
    return verifiers, weights


def _with_reward_funcs(config, overrides: list, names: list) -> list:
    """Overrides that add the functions ``verifier_function`` does not name yet (weight 1.0 each)."""
    rl = raw_train_config(config, overrides).get("rl_config") or {}
    # none named: the functions are the whole reward
    verifiers, weights = _add_names(rl.get("verifier_function") or [], rl.get("verifier_weight"), names)
    return overrides + [f"rl_config.verifier_function=[{','.join(verifiers)}]",
                        f"rl_config.verifier_weight=[{','.join(repr(float(w)) for w in weights)}]"]


def _config_with_reward_funcs(config: TrainConfig, names: list) -> TrainConfig:
    """A loaded config with the functions it does not name added, validated again from what its yaml and overrides
    gave: the config ``load_config(..., reward_funcs=...)`` makes from the same file and overrides."""
    if all(name in config.rl_config.verifier_function for name in names):
        return config
    raw = config.meta.raw
    if raw is None:  # built by hand, not loaded: its resolved lists are what it names
        data = config.to_dict()
    else:
        data = copy.deepcopy(raw)
    if not isinstance(data.get("rl_config"), dict):
        data["rl_config"] = {}
    rl = data["rl_config"]
    # none named (the loader's default `acc` is not the user's): the functions are the whole reward
    rl["verifier_function"], rl["verifier_weight"] = _add_names(rl.get("verifier_function") or [],
                                                                rl.get("verifier_weight"), names)
    return train_config_from_dict(data, source=config.meta.source, name=config.logging.name)


class GRPOTrainer(RLTrainer):
    """The RL trainer (every estimator) built from a config object, a yaml path or a dict of sections.

    ``reward_funcs`` the config's ``rl_config.verifier_function`` does not name are added to it with weight 1.0
    (the whole reward when the config names no verifier), however the config was given."""

    def __init__(self, config: Union[TrainConfig, str, os.PathLike, dict],
                 reward_funcs: Optional[Sequence[RewardFunc]] = None, overrides: Sequence[str] = ()):
        if not isinstance(config, TrainConfig):
            config = load_config(config, overrides, reward_funcs)
        elif overrides:
            raise ValueError("overrides apply to a yaml path or a dict; a loaded config already has them")
        else:
            config = _config_with_reward_funcs(config, register_reward_funcs(reward_funcs))
        super().__init__(config, reward_funcs)


PPOTrainer = GRPOTrainer  # one loop: the config's adv_estimator (gae + critic_config) makes it PPO
