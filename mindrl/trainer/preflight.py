"""Checks that read the files a config names, before MindSpore builds or compiles anything.

The config loader checks keys and that files exist; these checks open them (model configs, safetensors
headers, checkpoint manifests, tokenizer files, the datasets' prompts) to refuse runs that would fail late or
silently: a reward model without a score head, a critic or reward model whose vocabulary is not the policy's,
checkpoints that are damaged or whose shapes do not fit their config, a tokenizer or a dataset with ids beyond the
model's vocabulary, prompts longer than ``max_prompt_length``, lengths beyond the model's context, and output
directories that cannot be written or cannot hold one checkpoint. Every problem is one line
``<config file>: <key>: <what is wrong>``, raised together as a ConfigError.
"""
from __future__ import annotations

import os
from typing import List

import numpy as np

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
        src = TensorSource(weights_path(path, role, verify=True))
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
    """Raise ConfigError naming the key and file of everything found wrong. Runs once per config object (the
    CLI checks before it sets up anything, and the trainer, which the Python API builds directly, checks too)."""
    from mindrl.models.config import ModelConfigError, load_model_config
    from mindrl.parallel.topology import launch_topology
    if getattr(cfg, "_preflight_passed", False):
        return
    launch = launch_topology()  # preflight runs before the run's topology (and communication) exists
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
    _check_checkpoints(lines, cfg, policy)
    if policy is not None:
        _check_lengths(lines, cfg, policy)
    _check_outputs(lines, cfg, policy, launch.world)
    # the datasets are read last, and only when all else is well: reading them imports MindSpore (about 2 s), and
    # msrun's scheduler process, which stops at init(), leaves them to the workers
    if not lines and policy is not None and not launch.scheduler:
        _check_data(lines, cfg, policy)
    if lines:
        lines = [f"{source}: {line}" for line in dict.fromkeys(lines)]  # one damaged file can fail two checks
        raise ConfigError("\n".join(lines), lines)
    cfg._preflight_passed = True


def _check_checkpoints(lines: List[str], cfg, policy) -> None:
    """Every checkpoint the run will read matches its manifest (sizes and checksums), and the policy's tensors
    fit its model config. A damaged newest checkpoint is named with the newest intact one before it."""
    from mindrl.models.safetensors_io import CheckpointError
    from mindrl.models.weights import is_training_checkpoint, resolve, verify_checkpoint
    from mindrl.trainer import checkpoint as ck
    actor = cfg.actor_config
    if actor.load and policy is not None:
        from mindrl.models.convert import expected_tensors
        _check_shapes(lines, "actor_config.load", actor.load, expected_tensors(policy), need_head=False)
    if actor.load and not actor.finetune:
        try:
            directory = resolve(actor.load)
            if not is_training_checkpoint(directory):
                lines.append(f"actor_config.finetune: false resumes a run, but {actor.load} is not a mindrl training "
                             f"checkpoint (no {ck.TRAINER_STATE}); set finetune: true to start from these weights")
                return
            ck.load_trainer_state(directory)
            trained = [("policy", actor)] + ([("critic", cfg.critic_config)] if cfg.critic_config is not None else [])
            for role, section in trained:
                if not section.no_load_optim:  # each role restores its optimizer unless its own section says no
                    part = ck.role_dir(directory, role)
                    verify_checkpoint(directory, lambda rel, p=part: os.path.join(directory, rel) ==
                                      os.path.join(p, ck.OPTIMIZER))
        except CheckpointError as err:
            lines.append(f"actor_config.load: {err}")
    ref = cfg.ref.ref_model_load_path
    if ref and cfg.rl_config.kl_coef > 0:  # the trainer builds a reference model exactly then
        from mindrl.models.config import ModelConfigError, load_model_config
        from mindrl.models.convert import expected_tensors
        try:
            _check_shapes(lines, "ref.ref_model_load_path", ref, expected_tensors(load_model_config(cfg.ref.model)),
                          need_head=False)
        except ModelConfigError as err:
            lines.append(f"ref.model: {err}")


def _check_lengths(lines: List[str], cfg, policy) -> None:
    """The tokenizer's ids fit the model's embedding; prompt plus response fit the model's context."""
    from mindrl.data.tokenizer import TokenizerError, load_tokenizer
    gen = cfg.generate_config
    total = gen.max_prompt_length + gen.max_tokens
    if total > policy.max_position_embeddings:
        lines.append(f"generate_config.max_prompt_length + generate_config.max_tokens: {gen.max_prompt_length} + "
                     f"{gen.max_tokens} = {total} tokens exceed the model's context (max_position_embeddings "
                     f"{policy.max_position_embeddings} in {cfg.actor_config.model})")
    try:
        tok = load_tokenizer(cfg.actor_config.tokenizer_name_or_path)
    except (TokenizerError, OSError) as err:
        lines.append(f"actor_config.tokenizer_name_or_path: {err}")
        return
    if tok.vocab_size > policy.vocab_size:
        lines.append(f"actor_config.tokenizer_name_or_path: the tokenizer has {tok.vocab_size} tokens but the model "
                     f"({cfg.actor_config.model}) has vocab_size {policy.vocab_size}: ids from "
                     f"{policy.vocab_size} up have no embedding; use the model's own tokenizer")


_DATA_STATS = {}  # (path, size, mtime) -> prompt_stats: a file is scanned once per process


def _check_data(lines: List[str], cfg, policy) -> None:
    """Every prompt of the training (and held-out) set fits max_prompt_length and the model's vocabulary: a row
    that does not would otherwise stop the run when its batch is drawn, hours in, or train on garbage."""
    from mindrl.data.reader import prompt_stats
    gen = cfg.generate_config
    sets = [("data.path", cfg.data.path)]
    if cfg.eval.path and cfg.eval.path.endswith(".mindrecord"):
        sets.append(("eval.path", cfg.eval.path))
    elif cfg.eval.path:
        _check_jsonl_eval_set(lines, cfg, policy)
    for key, path in sets:
        st = os.stat(path)
        cache_key = (os.path.abspath(path), st.st_size, st.st_mtime_ns, cfg.data.prompt_key)
        try:
            stats = _DATA_STATS.get(cache_key) or prompt_stats(path, cfg.data.prompt_key)
        except Exception as err:  # MindSpore's readers raise RuntimeError with its own wording
            lines.append(f"{key}: cannot read prompts ({cfg.data.prompt_key!r}) from {path}: {err}".splitlines()[0])
            continue
        _DATA_STATS[cache_key] = stats
        if stats["longest"] > gen.max_prompt_length:
            lines.append(f"{key}: {path} row {stats['longest_row']} has a {stats['longest']}-token prompt, longer than "
                         f"generate_config.max_prompt_length={gen.max_prompt_length}: raise it, or preprocess with "
                         f"max_prompt_length={gen.max_prompt_length} to drop such rows")
        if stats["max_id"] >= policy.vocab_size:
            lines.append(f"{key}: {path} row {stats['max_id_row']} holds token id {stats['max_id']}, beyond the model's "
                         f"vocab_size {policy.vocab_size}: the data was tokenized with another tokenizer")


def _check_jsonl_eval_set(lines: List[str], cfg, policy) -> None:
    """A .jsonl held-out set is tokenized now (the evaluator reuses it): a row that cannot be read or tokenized is
    named by file and line, and its prompts must fit max_prompt_length and the vocabulary like the training set's."""
    from mindrl.trainer.evaluation import EvalSetError, load_eval_set
    from mindrl.data.preprocess import PreprocessError
    ev, gen = cfg.eval, cfg.generate_config
    try:
        prompts, _ = load_eval_set(ev.path, cfg.data.prompt_key, cfg.data.label_key, ev.num_samples,
                                   cfg.actor_config.tokenizer_name_or_path, ev.dataset_config)
    except (EvalSetError, PreprocessError) as err:
        lines.append(f"eval.path: {err}" if isinstance(err, EvalSetError) else f"eval.dataset_config: {err}")
        return
    if not prompts:
        lines.append(f"eval.path: {ev.path} holds no rows")
        return
    longest = max(range(len(prompts)), key=lambda i: len(prompts[i]))
    if len(prompts[longest]) > gen.max_prompt_length:
        lines.append(f"eval.path: {ev.path} row {longest + 1} has a {len(prompts[longest])}-token prompt, longer than "
                     f"generate_config.max_prompt_length={gen.max_prompt_length}")
    top = max(range(len(prompts)), key=lambda i: max(prompts[i], default=-1))
    if max(prompts[top], default=-1) >= policy.vocab_size:
        lines.append(f"eval.path: {ev.path} row {top + 1} holds token id {max(prompts[top])}, beyond the model's "
                     f"vocab_size {policy.vocab_size}")


def checkpoint_bytes(cfg, policy, world: int) -> int:
    """About how many bytes one checkpoint of this run takes on ``world`` ranks: per trained role, fp32 weights and
    two Adam moments, plus every rank's own shards on a multi-rank run."""
    from mindrl.models.convert import expected_tensors
    from mindrl.models.config import load_model_config
    configs = [policy] + ([load_model_config(cfg.critic_config.model)] if cfg.critic_config is not None else [])
    params = sum(int(np.prod(shape)) for c in configs for shape in expected_tensors(c).values())
    return 12 * params * (1 + (world if world > 1 else 0))


def _check_outputs(lines: List[str], cfg, policy, world: int) -> None:
    """The run can write where it will write (save, log_dir), and save can hold one checkpoint: found now, not at
    the first save (with save_interval 0, after the whole run)."""
    from mindrl.models.config import ModelConfigError
    targets = [("logging.log_dir", cfg.logging.log_dir, 1 << 20)]
    if cfg.actor_config.save:
        try:
            need = checkpoint_bytes(cfg, policy, world) if policy is not None else 0
        except ModelConfigError:
            need = 0  # the critic's config is reported by its own check
        targets.append(("actor_config.save", cfg.actor_config.save, need))
    for key, path, need in targets:
        problem = writable_problem(path, need)
        if problem:
            lines.append(f"{key}: {problem}")


def writable_problem(path: str, need: int = 0) -> str:
    """Why ``path`` (a directory, created later if missing) cannot take ``need`` bytes of new files; "" if it can."""
    import shutil
    import tempfile
    probe_dir = os.path.abspath(path)
    while not os.path.exists(probe_dir):
        probe_dir = os.path.dirname(probe_dir)
    if not os.path.isdir(probe_dir):
        return f"{path}: {probe_dir} is a file, not a directory"
    try:
        with tempfile.NamedTemporaryFile(dir=probe_dir, prefix=".mindrl-write-probe-"):
            pass
    except OSError as err:
        return f"{path} is not writable ({probe_dir}: {err.strerror})"
    free = shutil.disk_usage(probe_dir).free
    if free < need:
        return (f"{path} has {free / 2**20:.1f} MiB free on its filesystem, but one checkpoint of this run takes "
                f"about {need / 2**20:.1f} MiB")
    return ""
