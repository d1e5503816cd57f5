#!/usr/bin/env python
"""The MindRLHF Qwen-PPO tutorial's entry script, running on mindrl. The tutorial's command works as written:

    msrun --worker_num=2 --local_worker_num=2 --master_addr=127.0.0.1 --master_port=9123 --join=True \\
      --log_dir=./qwen2_one_log examples/qwen_ppo_tutorial/ppo_one_stage.py \\
      --sft_path_infer ./model_configs/qwen_ppo/generate_tiny.yaml \\
      --sft_path_train ./model_configs/qwen_ppo/finetune_tiny.yaml \\
      --reward_path ./model_configs/qwen_ppo/generate_tiny.yaml --critic_path ./model_configs/qwen_ppo/generate_tiny.yaml \\
      --mind_dataset_dir ./dataset/tiny_ppo/data.mindrecord --save_ckpt_dir ./runs/qwen_ppo_tiny/ckpt \\
      --use_parallel True --load_sft_checkpoint_infer examples/tiny/policy \\
      --load_sft_checkpoint_train examples/tiny/policy --load_rm_checkpoint runs/rm_tiny_math/latest/model \\
      --load_critic_checkpoint runs/rm_tiny_math/latest/model --load_ref_checkpoint examples/tiny/policy \\
      --enable_compile_cache False --only_save_strategy False

What each flag becomes (see docs/ppo.md):
- ``--sft_path_infer`` / ``--sft_path_train``: each a MindFormers model yaml or an HF model directory (config.json).
  They must describe the same model (two yamls may differ only in parallel_config; a yaml and an HF directory must
  agree on the architecture, see ARCHITECTURE) and set the rollout's and the training model's layouts:
  - a yaml: ``parallel_config.model_parallel`` is the tensor parallel degree, and data_parallel x model_parallel must
    be the number of msrun workers;
  - an HF directory: tensor parallel 1, data parallel = the number of workers. That is mindrl's own default when a
    config sets no tp (``tensor_model_parallel_size: 1``, data parallel derived from the world size); it fits any
    number of workers and any head count. Ask for more with an override after the flags, e.g.
    ``generate_config.infer_tensor_parallel_size=2``.
  Without msrun (one process) every layout is 1. The lengths follow MindRLHF from the first of the two that is a yaml:
  ``seq_length - max_decode_length`` is the prompt length and ``max_decode_length`` the response length; so does the
  rollout's sampling (the yaml's ``do_sample: False``, as MindRLHF's generate yaml has it, is a greedy rollout;
  otherwise its temperature, top_k, top_p), and its repetition_penalty. With two HF directories they come from
  ``--config`` or the overrides. The yaml's other model keys are read as MindFormers' LLaMA reads them
  (``kv_channels``, ``rotary_emb_base`` and ``rotary_pct``, which it stores but never reads, must restate what it
  uses).
- ``--reward_path`` / ``--critic_path``: the reward model's and critic's architecture, a yaml or an HF directory; the
  layout as above.
- ``--load_sft_checkpoint_train``: the policy's weights (an HF directory, a .ckpt or .safetensors file).
  ``--load_sft_checkpoint_infer`` must hold the same weights: unlike MindRLHF the rollout model is refreshed from the
  trained weights after every update, in place, so it never reads a checkpoint of its own.
- ``--load_rm_checkpoint``: the reward model's weights. Without it MindRLHF scores with a randomly initialised reward
  model; mindrl instead scores with the rule reward that ``--config`` names (``rl_config.verifier_function=[...]``
  after the flags), and refuses to start when it names none.
- ``--load_critic_checkpoint`` (default: the reward model, else the policy's backbone with a zero value head),
  ``--load_ref_checkpoint`` (default: the policy's weights; MindRLHF's default is a random reference model).
- The tokenizer: ``--tokenizer DIR``, else ``--load_sft_checkpoint_train`` when it holds one, else ``--sft_path_train``'s
  ``processor.tokenizer`` (``vocab_file`` with ``merges_file`` beside it), so a MindFormers ``.ckpt`` works.
- ``--mind_dataset_dir``: a MindRecord with MindRLHF's columns (``rlhf_data.py`` writes it).
- ``--save_ckpt_dir``: mindrl checkpoints (policy and critic). ``--enable_compile_cache``, ``--only_save_strategy``
  (write every role's strategy files to ./strategy and exit).
Training settings that MindRLHF keeps in ppo_config.py (batch sizes, learning rates, KL, PPO clip ranges) come from
``--config`` (default: examples/qwen_ppo_tutorial/ppo_config.yaml) and ``key=value`` overrides after ``--``.
Booleans are the strings true / false in any case (``True``, ``TRUE``), as MindRLHF's parser takes them. A path flag that names nothing usable (missing, the wrong kind
of file, an unwritable --save_ckpt_dir) stops the script with status 2 and one line per flag, naming it, before
MindSpore is imported.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))


def _bool(text: str) -> bool:
    """MindRLHF's transfer_from_str_to_bool: true or false in any case, nothing else."""
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected True or False (any case), got {text!r}")
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
    p.add_argument("--tokenizer", default=None, help="tokenizer directory (default: --load_sft_checkpoint_train when it "
                                                     "holds one, else the processor.tokenizer vocab_file and "
                                                     "merges_file of --sft_path_train's yaml)")
    p.add_argument("--config", default=os.path.join(HERE, "ppo_config.yaml"), help="mindrl training settings")
    p.add_argument("overrides", nargs="*", metavar="key.sub=value")
    return p.parse_args(argv)


class UsageError(Exception):
    """A flag the run cannot use; the message names the flag. ppo_one_stage.py exits with status 2."""


MODEL_FLAGS = ("sft_path_infer", "sft_path_train", "reward_path", "critic_path")
WEIGHT_FLAGS = ("load_sft_checkpoint_infer", "load_sft_checkpoint_train", "load_rm_checkpoint",
                "load_critic_checkpoint", "load_ref_checkpoint")
# What two model configs must share to describe one network. An HF config.json carries the model's own context
# (max_position_embeddings) and no compute dtype where a MindFormers yaml carries the run's (seq_length, dtypes), so a
# yaml and an HF directory are compared on these only; model_type is not among them because MindFormers' Qwen2 yamls
# say LlamaConfig with qkv_has_bias, which is the same network as HF's qwen2.
ARCHITECTURE = ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "n_kv_heads", "head_dim",
                "rms_norm_eps", "rope_theta", "rope_scaling", "tie_word_embeddings", "qkv_bias", "qk_norm")


def world_size() -> int:
    """The number of msrun workers (1 without msrun)."""
    return int(os.environ.get("MS_WORKER_NUM", os.environ.get("RANK_SIZE", "1")) or 1)


def is_hf(path: str) -> bool:
    """An HF model (a directory with config.json, or the config.json itself) rather than a MindFormers yaml."""
    return os.path.isdir(path) or path.endswith(".json")


class _Problems(list):
    """Collects one line per bad flag (mindrl's PathChecks reports through ``add``)."""

    def add(self, flag: str, msg: str) -> None:
        self.append(f"{flag}: {msg}")

    def raise_if_any(self) -> None:
        if self:
            raise UsageError("\n".join(self))


def check_paths(args) -> dict:
    """Every path flag names something the run can use, each problem one line naming the flag; nothing is read beyond
    existence, kind and writability. Returns the model flags' paths as resolved (a bare name is looked up in
    model_configs/, as mindrl's own config does)."""
    from mindrl.config.loader import PathChecks
    from mindrl.data.tokenizer import VOCABULARY_FILES, has_tokenizer
    from mindrl.trainer.preflight import writable_problem
    problems = _Problems()
    checks = PathChecks(problems)
    models = {name: checks.model(f"--{name}", getattr(args, name)) for name in MODEL_FLAGS}
    checks.mindrecord("--mind_dataset_dir", args.mind_dataset_dir, allow_jsonl=False)
    for name in WEIGHT_FLAGS:
        if getattr(args, name) is not None:
            checks.weights(f"--{name}", getattr(args, name))
    unwritable = writable_problem(args.save_ckpt_dir)
    if unwritable:
        problems.add("--save_ckpt_dir", unwritable)
    checks.exists("--config", args.config, "training config")
    if args.tokenizer is not None:
        checks.tokenizer("--tokenizer", args.tokenizer)
    elif args.load_sft_checkpoint_train and os.path.exists(args.load_sft_checkpoint_train) and \
            not has_tokenizer(args.load_sft_checkpoint_train):
        args.tokenizer = yaml_tokenizer(models["sft_path_train"], problems)
        if args.tokenizer is None and not problems:
            problems.add("--load_sft_checkpoint_train", f"{args.load_sft_checkpoint_train!r} holds no tokenizer (none "
                         f"of {', '.join(VOCABULARY_FILES)}), and --sft_path_train's processor.tokenizer names no "
                         f"vocab_file and merges_file; give --tokenizer DIR")
    problems.raise_if_any()
    return models


def yaml_tokenizer(path: str, problems) -> str | None:
    """The tokenizer a MindFormers yaml names: processor.tokenizer's vocab_file (a Qwen2Tokenizer's vocab.json) with
    its merges_file beside it, which is where mindrl's tokenizer loader reads merges.txt from."""
    import yaml
    if is_hf(path):
        return None
    with open(path, encoding="utf-8") as fh:
        tok = ((yaml.safe_load(fh) or {}).get("processor") or {}).get("tokenizer") or {}
    vocab, merges = tok.get("vocab_file") or "", tok.get("merges_file") or ""
    if not vocab and not merges:
        return None
    where = f"--sft_path_train {path}: processor.tokenizer"
    if not os.path.isfile(vocab) or not os.path.isfile(merges):
        problems.add("--sft_path_train", f"{where}: vocab_file {vocab!r} and merges_file {merges!r} must both exist")
    elif os.path.dirname(os.path.abspath(merges)) != os.path.dirname(os.path.abspath(vocab)):
        problems.add("--sft_path_train", f"{where}: merges_file {merges!r} is not beside vocab_file {vocab!r}; mindrl "
                                         f"reads merges.txt from the vocabulary's directory")
    else:
        return os.path.dirname(os.path.abspath(vocab))
    return None


def load_model(flag: str, path: str):
    from mindrl.models.config import ModelConfigError, load_model_config
    try:
        return load_model_config(path)
    except ModelConfigError as err:
        raise UsageError(f"--{flag}: {err}") from None


def tensor_parallel(flag: str, path: str, cfg, world: int) -> int:
    """The tensor parallel degree a model flag sets. A yaml: its parallel_config.model_parallel, and data_parallel x
    model_parallel must be the world size (MindFormers' rule). An HF directory carries no layout: tensor parallel 1
    and data parallel = the world size, which is what mindrl's own config does when no tp is set, and works for any
    number of workers and any head count. Without msrun everything runs in one process: 1."""
    if world == 1 or is_hf(path):
        return 1
    if cfg.data_parallel * cfg.model_parallel != world:
        raise UsageError(f"--{flag} {path}: data_parallel {cfg.data_parallel} x model_parallel {cfg.model_parallel} "
                         f"does not match the {world} msrun workers")
    return cfg.model_parallel


def check_same_model(args, paths: dict, infer, train) -> None:
    """--sft_path_infer and --sft_path_train describe one model: two yamls may differ only in parallel_config, a
    yaml and an HF directory (or two HF directories) must agree on ARCHITECTURE."""
    import dataclasses
    both_yaml = not is_hf(paths["sft_path_infer"]) and not is_hf(paths["sft_path_train"])
    keys = [f.name for f in dataclasses.fields(infer) if f.name not in ("source", "data_parallel", "model_parallel")] \
        if both_yaml else ARCHITECTURE
    differ = [f"{k} {getattr(infer, k)!r} vs {getattr(train, k)!r}" for k in keys
              if getattr(infer, k) != getattr(train, k)]
    if differ:
        rule = "they may differ only in parallel_config" if both_yaml else \
            "a yaml and an HF directory must agree on the architecture"
        raise UsageError(f"--sft_path_infer {args.sft_path_infer} and --sft_path_train {args.sft_path_train} describe "
                         f"different models ({', '.join(differ)}); {rule}")


def rollout_settings(paths: dict, configs: dict) -> dict:
    """What MindRLHF's rollout takes from the first of --sft_path_infer, --sft_path_train that is a yaml: the lengths
    (max_tokens = max_decode_length, max_prompt_length = seq_length - max_decode_length) and the sampling keys of
    model.model_config, which MindFormers' generate() reads (do_sample: False is greedy, and then top_k and top_p do
    nothing). Two HF directories carry neither: --config and the overrides give them."""
    import yaml
    for flag in ("sft_path_infer", "sft_path_train"):
        if is_hf(paths[flag]):
            continue
        with open(paths[flag]) as fh:
            mc = yaml.safe_load(fh)["model"]["model_config"] or {}
        decode = mc.get("max_decode_length")
        seq = int(configs[flag].max_position_embeddings)
        if not decode or not 0 < int(decode) < seq:
            raise UsageError(f"--{flag} {paths[flag]}: model.model_config.max_decode_length is needed, between 1 and "
                             f"seq_length - 1 = {seq - 1} (the response length; the prompt gets seq_length - "
                             f"max_decode_length), got {decode!r}")
        out = {"generate_config.max_tokens": int(decode), "generate_config.max_prompt_length": seq - int(decode)}
        if mc.get("do_sample") is False:
            out["generate_config.do_sample"] = "false"
        else:
            for key in ("temperature", "top_k", "top_p"):
                if mc.get(key) is not None:
                    out[f"generate_config.{key}"] = mc[key]
        if mc.get("repetition_penalty") is not None:
            out["generate_config.repetition_penalty"] = float(mc["repetition_penalty"])
        return out
    return {}


def rule_rewards(args) -> bool:
    """--config (with the overrides after the flags) names a rule reward."""
    from mindrl.config import ConfigError, raw_train_config
    try:
        rl = raw_train_config(args.config, args.overrides).get("rl_config") or {}
    except ConfigError as err:
        raise UsageError(f"--config: {err}") from None
    return bool(rl.get("verifier_function"))


def overrides_for(args, world: int | None = None) -> list:
    """The tutorial's flags as mindrl config overrides, or UsageError naming the flag. Reads only small files (model
    configs, and the two sft checkpoints when they differ), no MindSpore: msrun's scheduler runs this part too.
    ``world``: the number of workers (default: msrun's environment)."""
    if args.save_data_file:
        raise UsageError("--save_data_file: mindrl does not store rollouts; remove the flag")
    if args.load_sft_checkpoint_train is None:
        raise UsageError("--load_sft_checkpoint_train: required (the policy's weights)")
    paths = check_paths(args)
    world = world_size() if world is None else world
    if world > 1 and not args.use_parallel:
        raise UsageError(f"--use_parallel False, but msrun started {world} workers; pass --use_parallel True")
    configs = {flag: load_model(flag, paths[flag]) for flag in MODEL_FLAGS}
    check_same_model(args, paths, configs["sft_path_infer"], configs["sft_path_train"])
    tp = {flag: tensor_parallel(flag, paths[flag], configs[flag], world) for flag in MODEL_FLAGS}
    if args.load_sft_checkpoint_infer and os.path.abspath(args.load_sft_checkpoint_infer) != \
            os.path.abspath(args.load_sft_checkpoint_train):
        _same_weights(args.load_sft_checkpoint_infer, args.load_sft_checkpoint_train)
    out = {
        "actor_config.model": paths["sft_path_train"], "actor_config.load": args.load_sft_checkpoint_train,
        "actor_config.tokenizer_name_or_path": args.tokenizer or args.load_sft_checkpoint_train,
        "actor_config.save": args.save_ckpt_dir,
        "actor_config.tensor_model_parallel_size": tp["sft_path_train"],
        "generate_config.infer_tensor_parallel_size": tp["sft_path_infer"],
        **rollout_settings(paths, configs),

        "critic_config.model": paths["critic_path"], "critic_config.tensor_model_parallel_size": tp["critic_path"],
        "data.path": args.mind_dataset_dir, "runtime.enable_compile_cache": str(args.enable_compile_cache).lower(),
        "runtime.only_save_strategy": str(args.only_save_strategy).lower(),
    }
    if args.load_rm_checkpoint is not None:
        out.update({"reward_config.load": args.load_rm_checkpoint, "reward_config.model": paths["reward_path"],
                    "reward_config.tensor_model_parallel_size": tp["reward_path"]})
    elif not rule_rewards(args):
        # MindRLHF then scores with a randomly initialised reward model: mindrl refuses to train on noise
        raise UsageError("--load_rm_checkpoint: not given, and --config names no rule reward to score with; give the "
                         "reward model's weights, or score with a rule: rl_config.verifier_function=[math_acc] after "
                         "the flags")
    if args.load_critic_checkpoint:
        out["critic_config.load"] = args.load_critic_checkpoint
    if args.load_ref_checkpoint:
        out["ref.ref_model_load_path"] = args.load_ref_checkpoint
    return [f"{k}={v}" for k, v in out.items()] + list(args.overrides)


def _same_weights(a: str, b: str) -> None:
    """The infer checkpoint must be the train checkpoint's weights: compared tensor by tensor."""
    import numpy as np
    from mindrl.models.safetensors_io import CheckpointError
    from mindrl.models.weights import TensorSource
    sources = {}
    for flag, path in (("load_sft_checkpoint_infer", a), ("load_sft_checkpoint_train", b)):
        try:
            sources[flag] = TensorSource(path)
        except CheckpointError as err:
            raise UsageError(f"--{flag}: {err}") from None
    sa, sb = sources.values()
    if sorted(sa.names()) != sorted(sb.names()) or any(not np.array_equal(sa.get(n), sb.get(n)) for n in sa.names()):
        raise UsageError(f"--load_sft_checkpoint_infer {a} holds other weights than --load_sft_checkpoint_train {b}; "
                         f"mindrl's rollout model takes its weights from the train model (pass the same checkpoint)")


def main(argv=None) -> int:
    args = parse(argv)
    try:
        overrides = overrides_for(args)
    except UsageError as err:
        print("\n".join(f"ppo_one_stage.py: {line}" for line in str(err).splitlines()), file=sys.stderr)
        return 2
    from mindrl.trainer.cli import train_main
    return train_main(["--config", args.config] + overrides)


if __name__ == "__main__":
    sys.exit(main())
