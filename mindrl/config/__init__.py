"""Training configuration: typed sections, yaml loading, command-line overrides, validation.

Imports only the standard library and yaml, so it is safe before msrun's ``init()``::

    from mindrl.config import load_train_config
    cfg = load_train_config("examples/grpo/tiny_math.yaml", ["rl_config.kl_coef=0.01"])
    cfg.rl_config.mini_batch_size, cfg.fingerprint("actor_config", "generate_config")

See docs/configuration.md for every key.
"""
from mindrl.config.loader import ConfigKind, config_from_dict, load_config, raw_config
from mindrl.config.yaml_io import dump_yaml, parse_yaml
from mindrl.config.train import ALIASES, TRAIN, load_train_config, raw_train_config, train_config_from_dict
from mindrl.config.schema import (
    SECTIONS,
    ActorConfig,
    ConfigError,
    CriticConfig,
    RewardModelConfig,
    DataConfig,
    EvalConfig,
    GenerateConfig,
    LoggingConfig,
    RefConfig,
    RLConfig,
    RuntimeConfig,
    TrainConfig,
)

__all__ = [
    "ALIASES", "SECTIONS", "TRAIN", "ActorConfig", "ConfigError", "ConfigKind", "CriticConfig", "DataConfig",
    "EvalConfig", "RewardModelConfig", "load_config",
    "GenerateConfig", "LoggingConfig", "RefConfig", "RLConfig", "RuntimeConfig", "TrainConfig",
    "config_from_dict", "dump_yaml", "load_train_config", "parse_yaml", "raw_config", "raw_train_config",
    "train_config_from_dict",
]
