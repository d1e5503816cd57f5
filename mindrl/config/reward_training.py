"""The config of `mindrl train-rm`: an outcome reward model trained on preference pairs (Bradley-Terry).

Sections: ``rm_config`` (the model, its weights, output and optimizer), ``train`` (batch sizes and length),
``data`` (pairwise MindRecord from `mindrl preprocess` with the pairwise handler), ``eval`` (held-out pairs),
``logging`` and ``runtime``. Standard library and yaml only.
"""
from __future__ import annotations

from dataclasses import dataclass

from mindrl.config.loader import ConfigKind, load_config
from mindrl.config import offline
from mindrl.config.offline import EvalSection, RuntimeSection, TrainSection, TrainedModelConfig
from mindrl.config.schema import ConfigRoot, LoggingConfig, _opt


@dataclass(kw_only=True)
class RMModelConfig(TrainedModelConfig):
    load: str | None = _opt(None, path=True, help="initial weights: a causal LM (its backbone; a new score head) "
                            "or a reward model to train further; with finetune false, the train-rm checkpoint to "
                            "resume; null = random")


@dataclass(kw_only=True)
class RMDataConfig:
    path: str = _opt(path=True, help="pairwise .mindrecord written by `mindrl preprocess` (pairwise handler)")
    shuffle: bool = _opt(True, help="shuffle the pairs every epoch")
    seed: int | None = _opt(None, ge=0, lt=2**32, derived=True, help="shuffle seed; null = runtime.seed")
    chosen_key: str = _opt("chosen_ids", help="column with the preferred sequence (prompt + response)")
    rejected_key: str = _opt("rejected_ids", help="column with the other sequence")
    margin_key: str | None = _opt(None, help="column with a per-pair margin; null = no margin")


@dataclass(kw_only=True)
class RewardTrainConfig(ConfigRoot):
    rm_config: RMModelConfig = _opt(help="the reward model: architecture, weights, output, optimizer")
    train: TrainSection = _opt(factory=TrainSection, help="batch sizes and length")
    data: RMDataConfig = _opt(help="training pairs")
    eval: EvalSection = _opt(factory=EvalSection, help="held-out pairs")
    logging: LoggingConfig = _opt(factory=LoggingConfig, help="metrics output")
    runtime: RuntimeSection = _opt(factory=RuntimeSection, help="MindSpore runtime")


def _rules(cfg: RewardTrainConfig, explicit: set, err) -> None:
    offline.check_rules(cfg, explicit, err, "rm_config", "train-rm")


def _paths(cfg: RewardTrainConfig, err) -> None:
    offline.check_paths(cfg, err, "rm_config", "train-rm")


# keys of earlier versions, refused with what replaced them
RETIRED = {"rm_config.overwrite": "the model is now written into the run directory, <run_dir>/model (a new "
                                  "directory for every run, nothing to overwrite), and rm_config.save holds "
                                  "checkpoints to resume from (e.g. <run_dir>/ckpt); remove it"}

REWARD_TRAINING = ConfigKind(RewardTrainConfig, {"seed": "runtime.seed"}, {
    "rl_config": "a reward model is trained with rm_config / train / data; RL settings go to `mindrl train`",
    "actor_config": "the model being trained is rm_config (model, tokenizer_name_or_path, load, save, lr, ...)",
}, offline.resolve, _rules, _paths, retired=RETIRED)


def load_reward_training_config(path, overrides=(), *, check_paths: bool = True) -> RewardTrainConfig:
    return load_config(path, overrides, check_paths=check_paths, kind=REWARD_TRAINING)
