#!/usr/bin/env python
"""The MindRLHF Qwen-PPO tutorial's entry script, running on mindrl. The tutorial's command works as written:

    msrun --worker_num=2 --local_worker_num=2 --master_addr=127.0.0.1 --master_port=9123 --join=True \\
      --log_dir=./qwen2_one_log examples/qwen_ppo_tutorial/ppo_one_stage.py \\
      --sft_path_infer ./model_configs/qwen_ppo/generate_tiny.yaml \\
      --sft_path_train ./model_configs/qwen_ppo/finetune_tiny.yaml \\
      --reward_path ./model_configs/qwen_ppo/generate_tiny.yaml --critic_path ./model_configs/qwen_ppo/generate_tiny.yaml \\
      --mind_dataset_dir ./dataset/tiny_ppo/data.mindrecord --save_ckpt_dir ./runs/qwen_ppo_tiny/ckpt \\
      --use_parallel True --load_sft_checkpoint_infer examples/tiny/policy \\
      --load_sft_checkpoint_train examples/tiny/policy --load_rm_checkpoint runs/rm_tiny_math/model \\
      --load_critic_checkpoint runs/rm_tiny_math/model --load_ref_checkpoint examples/tiny/policy \\
      --enable_compile_cache False --only_save_strategy False

What each flag becomes (see docs/ppo.md):
- ``--sft_path_infer`` / ``--sft_path_train``: MindFormers model yamls. The architecture (they must agree) and two
  layouts: ``parallel_config.model_parallel`` of each is the tensor parallel degree of the rollout and the training
  model. ``seq_length - max_decode_length`` is the prompt length and ``max_decode_length`` the response length, as in
  MindRLHF.
- ``--reward_path`` / ``--critic_path``: the reward model's and critic's yamls (their model_parallel sets their layouts).
- ``--load_sft_checkpoint_train``: the policy's weights (an HF directory, a .ckpt or .safetensors file).
  ``--load_sft_checkpoint_infer`` must hold the same weights: unlike MindRLHF the rollout model is refreshed from the
  trained weights after every update, in place, so it never reads a checkpoint of its own.
- ``--load_rm_checkpoint`` (required), ``--load_critic_checkpoint`` (default: the reward model),
  ``--load_ref_checkpoint`` (default: the policy's weights).
- ``--mind_dataset_dir``: a MindRecord with MindRLHF's columns (``rlhf_data.py`` writes it).
- ``--save_ckpt_dir``: mindrl checkpoints (policy and critic). ``--enable_compile_cache``, ``--only_save_strategy``
  (write every role's strategy files to ./strategy and exit).
Training settings that MindRLHF keeps in ppo_config.py (batch sizes, learning rates, KL, PPO clip ranges) come from
``--config`` (default: examples/qwen_ppo_tutorial/ppo_config.yaml) and ``key=value`` overrides after ``--``.
Booleans are the strings True / False, as in MindRLHF.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))


def _bool(text: str) -> bool:
    if text not in ("True", "False", "true", "false"):
        raise argparse.ArgumentTypeError(f"expected True or False, got {text!r}")
    return text.lower() == "true"


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name in ("sft_path_infer", "sft_path_train", "reward_path", "critic_path", "mind_dataset_dir"):
        p.add_argument(f"--{name}", required=True)
    p.add_argument("--save_ckpt_dir", default="./")
    p.add_argument("--use_parallel", type=_bool, default=False)
    for name in ("load_sft_checkpoint_infer", "load_sft_checkpoint_train", "load_rm_checkpoint",
                 "load_critic_checkpoint", "load_ref_checkpoint", "save_data_file"):
        p.add_argument(f"--{name}", default=None)
    p.add_argument("--enable_compile_cache", type=_bool, default=False)
    p.add_argument("--only_save_strategy", type=_bool, default=False)
    p.add_argument("--tokenizer", default=None, help="tokenizer directory (default: --load_sft_checkpoint_train)")
    p.add_argument("--config", default=os.path.join(HERE, "ppo_config.yaml"), help="mindrl training settings")
    p.add_argument("overrides", nargs="*", metavar="key.sub=value")
    return p.parse_args(argv)


class UsageError(Exception):
    pass


def overrides_for(args) -> list:
    """The tutorial's flags as mindrl config overrides (no MindSpore: msrun's scheduler runs this part too)."""
    import yaml
    from mindrl.models.config import load_model_config
    if args.save_data_file:
        raise UsageError("--save_data_file: mindrl does not store rollouts; remove the flag")
    if args.load_sft_checkpoint_train is None:
        raise UsageError("--load_sft_checkpoint_train: required (the policy's weights)")
    if args.load_rm_checkpoint is None:
        raise UsageError("--load_rm_checkpoint: required (the reward model that scores the rollouts)")
    world = int(os.environ.get("MS_WORKER_NUM", os.environ.get("RANK_SIZE", "1")) or 1)
    if world > 1 and not args.use_parallel:
        raise UsageError(f"--use_parallel False, but msrun started {world} workers; pass --use_parallel True")
    infer, train = load_model_config(args.sft_path_infer), load_model_config(args.sft_path_train)
    same = {k: v for k, v in infer.to_hf_dict().items()} == {k: v for k, v in train.to_hf_dict().items()}
    if not same:
        raise UsageError(f"--sft_path_infer {args.sft_path_infer} and --sft_path_train {args.sft_path_train} describe "
                         f"different models; they may differ only in parallel_config")
    for flag, cfg in (("sft_path_infer", infer), ("sft_path_train", train)):
        if world > 1 and cfg.data_parallel * cfg.model_parallel != world:
            raise UsageError(f"--{flag} {getattr(args, flag)}: data_parallel {cfg.data_parallel} x model_parallel "
                             f"{cfg.model_parallel} does not match the {world} msrun workers")
    with open(args.sft_path_infer) as fh:
        decode = (yaml.safe_load(fh)["model"]["model_config"] or {}).get("max_decode_length")
    if not decode:
        raise UsageError(f"--sft_path_infer {args.sft_path_infer}: model.model_config.max_decode_length is needed "
                         f"(the response length; the prompt gets seq_length - max_decode_length)")
    if args.load_sft_checkpoint_infer and os.path.abspath(args.load_sft_checkpoint_infer) != \
            os.path.abspath(args.load_sft_checkpoint_train):
        _same_weights(args.load_sft_checkpoint_infer, args.load_sft_checkpoint_train)
    tokenizer = args.tokenizer or args.load_sft_checkpoint_train
    tp = lambda path: load_model_config(path).model_parallel if world > 1 else 1  # noqa: E731
    out = {
        "actor_config.model": args.sft_path_train, "actor_config.load": args.load_sft_checkpoint_train,
        "actor_config.tokenizer_name_or_path": tokenizer, "actor_config.save": args.save_ckpt_dir,
        "actor_config.tensor_model_parallel_size": tp(args.sft_path_train),
        "generate_config.infer_tensor_parallel_size": tp(args.sft_path_infer),
        "generate_config.max_tokens": int(decode),
        "generate_config.max_prompt_length": int(infer.max_position_embeddings) - int(decode),
        "reward_config.load": args.load_rm_checkpoint, "reward_config.model": args.reward_path,
        "reward_config.tensor_model_parallel_size": tp(args.reward_path),
        "critic_config.model": args.critic_path, "critic_config.tensor_model_parallel_size": tp(args.critic_path),
        "data.path": args.mind_dataset_dir, "runtime.enable_compile_cache": str(args.enable_compile_cache).lower(),
        "runtime.only_save_strategy": str(args.only_save_strategy).lower(),
    }
    if args.load_critic_checkpoint:
        out["critic_config.load"] = args.load_critic_checkpoint
    if args.load_ref_checkpoint:
        out["ref.ref_model_load_path"] = args.load_ref_checkpoint
    return [f"{k}={v}" for k, v in out.items()] + list(args.overrides)


def _same_weights(a: str, b: str) -> None:
    """The infer checkpoint must be the train checkpoint's weights: compared tensor by tensor."""
    import numpy as np
    from mindrl.models.weights import TensorSource
    sa, sb = TensorSource(a), TensorSource(b)
    if sorted(sa.names()) != sorted(sb.names()) or any(not np.array_equal(sa.get(n), sb.get(n)) for n in sa.names()):
        raise UsageError(f"--load_sft_checkpoint_infer {a} holds other weights than --load_sft_checkpoint_train {b}; "
                         f"mindrl's rollout model takes its weights from the train model (pass the same checkpoint)")


def main(argv=None) -> int:
    args = parse(argv)
    from mindrl.trainer.cli import train_main
    try:
        overrides = overrides_for(args)
    except UsageError as err:
        print(f"ppo_one_stage.py: {err}", file=sys.stderr)
        return 2
    return train_main(["--config", args.config] + overrides)


if __name__ == "__main__":
    sys.exit(main())
