"""The config of `mindrl sft`: supervised fine-tuning of a causal LM on SFT rows (prompt + response, loss on the
response tokens).

Sections: ``sft_config`` (the model, its weights, output and optimizer), ``train`` (batch sizes and length),
``data`` (SFT MindRecord from `mindrl preprocess` with the sft handler), ``eval`` (held-out SFT rows), ``logging``
and ``runtime`` (config/offline.py has what they share with `mindrl train-rm`'s). MindSpeed-RL's SFT keys (its
flat ``sft:`` section) are read inside ``sft_config`` where mindrl has the same meaning, and refused with the
reason where it has not. Standard library and yaml only.
"""
from __future__ import annotations

from dataclasses import dataclass

from mindrl.config import offline
from mindrl.config.loader import ConfigKind, load_config
from mindrl.config.offline import EvalSection, RuntimeSection, TrainSection, TrainedModelConfig
from mindrl.config.schema import ConfigRoot, LoggingConfig, _opt


@dataclass(kw_only=True)
class SFTModelConfig(TrainedModelConfig):
    load: str | None = _opt(None, path=True, help="initial weights: a causal LM (HF directory, weights file, or a "
                            "mindrl checkpoint's policy); with finetune false, the sft checkpoint to resume; "
                            "null = random")


@dataclass(kw_only=True)
class SFTDataConfig:
    path: str = _opt(path=True, help="SFT .mindrecord written by `mindrl preprocess` (sft handler): pretrain_ids "
                     "and loss_mask columns")
    shuffle: bool = _opt(True, help="shuffle the rows every epoch")
    seed: int | None = _opt(None, ge=0, lt=2**32, derived=True, help="shuffle seed; null = runtime.seed")
    pad_to_multiple_of: int = _opt(0, ge=0, help="the width each micro-batch is padded to: 0 = the next power of "
                                   "two of its longest row (few widths, so few graphs to compile); n = the next "
                                   "multiple of n (TRL's pad_to_multiple_of: less padding computed, a compiled graph "
                                   "per width met)")
    packing: bool = _opt(False, help="pack each micro-batch's rows into as few sequences of its width as they fit "
                         "in, each row attending only to itself with positions from 0: the same loss and gradient, "
                         "less padding computed")


@dataclass(kw_only=True)
class SFTConfig(ConfigRoot):
    sft_config: SFTModelConfig = _opt(help="the model: architecture, weights, output, optimizer")
    train: TrainSection = _opt(factory=TrainSection, help="batch sizes and length")
    data: SFTDataConfig = _opt(help="training rows")
    eval: EvalSection = _opt(factory=EvalSection, help="held-out rows")
    logging: LoggingConfig = _opt(factory=LoggingConfig, help="metrics output")
    runtime: RuntimeSection = _opt(factory=RuntimeSection, help="MindSpore runtime")


def _rules(cfg: SFTConfig, explicit: set, err) -> None:
    offline.check_rules(cfg, explicit, err, "sft_config", "sft")


def _paths(cfg: SFTConfig, err) -> None:
    offline.check_paths(cfg, err, "sft_config", "sft")


# MindSpeed-RL's SFT keys (its `sft:` section, here inside sft_config) read with the same meaning
MINDSPEED_ALIASES = {
    "seed": "runtime.seed",
    "sft_config.global_batch_size": "train.global_batch_size",
    "sft_config.micro_batch_size": "train.micro_batch_size",
    "sft_config.train_iters": "train.train_iters",
    "sft_config.data_path": "data.path",
    "sft_config.seed": "runtime.seed",
    "sft_config.log_interval": "logging.log_interval",
    "sft_config.eval_interval": "eval.interval",
}

_PREPROCESS = "is a preprocessing key: give it to `mindrl preprocess` (configs/datasets/sft.yaml); the MindRecord " \
              "holds the rendered, tokenized rows; remove it"
# MindSpeed-RL's SFT keys mindrl does not read with their meaning: refused with the reason
MINDSPEED_REFUSED = {
    "sft_config.no_shuffle": "MindSpeed-RL's spelling: mindrl's is data.shuffle (no_shuffle: true is "
                             "data.shuffle: false)",
    "sft_config.seq_length": "sft has no length key: `mindrl preprocess` dropped rows longer than its seq_length, "
                             "and each micro-batch is padded from its longest row (data.pad_to_multiple_of); "
                             "remove it",
    "sft_config.variable_seq_lengths": "sft always pads each micro-batch from its longest row (variable lengths, "
                                       "data.pad_to_multiple_of); remove it",
    "sft_config.reset_position_ids": "mindrl packs rows itself (data.packing: true) and then always starts each "
                                     "row's positions at 0; MindSpeed-RL's key is for data packed in "
                                     "preprocessing, which mindrl does not read; remove it",
    "sft_config.reset_attention_mask": "mindrl packs rows itself (data.packing: true) and then always keeps each "
                                       "row's attention to itself; MindSpeed-RL's key is for data packed in "
                                       "preprocessing, which mindrl does not read; remove it",
    "sft_config.is_instruction_dataset": "sft always trains on instruction rows (the loss on the response tokens "
                                         "only, loss_mask); remove it",
    "sft_config.stage": "the command is the stage: `mindrl sft`; remove it",
    "sft_config.eval_iters": "MindSpeed-RL counts held-out batches; mindrl counts rows: eval.num_samples "
                             "(eval.path is the held-out file)",
    "sft_config.split": "mindrl reads held-out rows from their own file: eval.path (preprocess them separately)",
    "sft_config.no_load_rng": "nothing random is restored on resume (no dropout; the data order is the saved "
                              "position); remove it",
    "sft_config.no_save_optim": "a checkpoint always holds the optimizer (resume needs it); remove it",
    "sft_config.no_save_rng": "no random state is saved (no dropout; the data order is the saved position); remove it",
    "sft_config.bf16": "mindrl's spelling is sft_config.compute_dtype: bfloat16",
    "sft_config.fp16": "mindrl's spelling is sft_config.compute_dtype: float16",
    "sft_config.prompt_type": _PREPROCESS,
    "sft_config.tokenizer_type": _PREPROCESS,
    "sft_config.tokenizer_not_use_fast": _PREPROCESS,
}

SFT = ConfigKind(SFTConfig, MINDSPEED_ALIASES, {
    "sft": "MindSpeed-RL's flat section: its keys go under sft_config (model, load, lr, global_batch_size, data_path, "
           "...; see docs/sft.md)",
    "rl_config": "supervised fine-tuning is configured with sft_config / train / data; RL settings go to `mindrl train`",
    "actor_config": "the model being trained is sft_config (model, tokenizer_name_or_path, load, save, lr, ...)",
    "rm_config": "a reward model is trained by `mindrl train-rm`; the model of `mindrl sft` is sft_config",
}, offline.resolve, _rules, _paths, retired=MINDSPEED_REFUSED)


def load_sft_config(path, overrides=(), *, check_paths: bool = True) -> SFTConfig:
    return load_config(path, overrides, check_paths=check_paths, kind=SFT)
