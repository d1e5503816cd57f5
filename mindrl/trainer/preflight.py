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
import shutil
import tempfile
from typing import List

import numpy as np

from mindrl.config import ConfigError
from mindrl.config.loader import recompute_beyond
from mindrl.data.reader import PTX_COLUMNS, mindrecord_columns, prompt_stats
from mindrl.data.tokenizer import TokenizerError, load_tokenizer
from mindrl.models.config import ModelConfigError, load_model_config, reward_statistics
from mindrl.models.convert import expected_tensors
from mindrl.models.safetensors_io import CheckpointError
from mindrl.models.weights import TensorSource, is_training_checkpoint, resolve, verify_checkpoint, weights_path
from mindrl.parallel.topology import launch_topology
from mindrl.trainer import checkpoint as ck
from mindrl.trainer.checkpointer import resume_keys
from mindrl.trainer.evaluation import EvalSetError, load_eval_set


def _head_model_tensors(config) -> dict:
    """Name -> shape of a sequence-classification model (value or reward): the backbone and a [1, hidden] head."""
    out = {k: v for k, v in expected_tensors(config).items() if k != "lm_head.weight"}
    out["score.weight"] = (1, config.hidden_size)
    return out


def _check_shapes(lines: List[str], key: str, path: str, want: dict, need_head: bool, role: str = "policy") -> None:
    if os.path.isfile(path) and path.endswith(".ckpt"):
        return  # a MindSpore .ckpt is read only by MindSpore; load_into checks it while loading
    try:
        src = TensorSource(weights_path(path, role, verify=True, key=key))
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


def recompute_fits(lines: List[str], section: str, sec, config) -> None:
    """A trained role's recompute_num_layers is at most its model's layers (``config``: None when unreadable)."""
    why = recompute_beyond(sec, config.num_layers) if config is not None else None
    if why:
        lines.append(f"{section}.recompute_num_layers: {why}")


def layer_graphs_fit(lines: List[str], section: str, sec, config) -> None:
    """``<section>.layer_graphs`` and a model yaml that recomputes layers (its recompute_config) exclude each other."""
    if config is not None and sec.layer_graphs and config.recompute_layers():
        lines.append(f"{section}.layer_graphs: the model {sec.model!r} recomputes layers (its yaml's recompute_config), "
                     f"and the layer graphs already run each layer's forward again in its backward; turn one of them "
                     f"off")


def preflight(cfg, source: str = "<config>") -> None:
    """Raise ConfigError naming the key and file of everything found wrong. Runs once per config object (the
    CLI checks before it sets up anything, and the trainer, which the Python API builds directly, checks too)."""
    if cfg.meta.files_checked:
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
    recompute_fits(lines, "actor_config", cfg.actor_config, policy)
    layer_graphs_fit(lines, "actor_config", cfg.actor_config, policy)
    if policy is not None:
        _check_memory(lines, policy)
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
            if reward_statistics(rm.load) is None:
                lines.append(f"reward_config.normalize: {rm.load!r} stores no reward mean/std in its config.json "
                             f"(`mindrl train-rm` writes them); set normalize: false")
    if critic is not None:
        critic_model = model("critic_config.model", critic.model)
        if critic_model is not None and policy is not None and critic_model.vocab_size != policy.vocab_size:
            lines.append(f"critic_config.model: vocab_size {critic_model.vocab_size} is not the policy's "
                         f"{policy.vocab_size}: the critic reads the policy's token ids")
        recompute_fits(lines, "critic_config", critic, critic_model)
        layer_graphs_fit(lines, "critic_config", critic, critic_model)
        if critic_model is not None and critic.load is not None:
            _check_shapes(lines, "critic_config.load", critic.load, _head_model_tensors(critic_model), need_head=False,
                          role="critic")
    ptx = cfg.data.ptx_path if cfg.rl_config.pretrain_coef > 0 else None
    if ptx is not None:
        missing = [c for c in PTX_COLUMNS if c not in mindrecord_columns(ptx)]
        if missing:
            key = "data.ptx_path" if "data.ptx_path" in cfg.meta.explicit else "rl_config.pretrain_coef"
            lines.append(f"{key}: {ptx!r} has no {' or '.join(missing)} column: PPO-ptx trains on SFT rows "
                         f"(`mindrl preprocess` with handler_name sft, or rlhf_data.py); set data.ptx_path to such a "
                         f"file")
    resumed = _check_checkpoints(lines, cfg, policy)
    _check_reference(lines, cfg, policy)
    if policy is not None:
        _check_lengths(lines, cfg, policy)
    _check_outputs(lines, cfg, policy, launch.world)
    # the datasets are read last, and only when all else is well: reading them imports MindSpore (about 2 s), and
    # msrun's scheduler process, which stops at init(), leaves them to the workers
    if not lines and policy is not None and not launch.scheduler:
        _check_data(lines, cfg, policy, resumed)
    if lines:
        lines = [f"{source}: {line}" for line in dict.fromkeys(lines)]  # one damaged file can fail two checks
        raise ConfigError("\n".join(lines), lines)
    cfg.meta.files_checked = True


def _check_checkpoints(lines: List[str], cfg, policy) -> dict:
    """Every checkpoint the run will read matches its manifest (sizes and checksums), and the policy's tensors
    fit its model config. A damaged newest checkpoint is named with the newest intact one before it. Returns what
    the run being resumed recorded of its data (``_check_data`` compares the dataset with it), else {}."""
    actor = cfg.actor_config
    if actor.load and policy is not None:
        _check_shapes(lines, "actor_config.load", actor.load, expected_tensors(policy), need_head=False)
    if actor.load and not actor.finetune:
        try:
            directory = resolve(actor.load)
            if not is_training_checkpoint(directory):
                lines.append(f"actor_config.finetune: false resumes a run, but {actor.load} is not a mindrl training "
                             f"checkpoint (no {ck.TRAINER_STATE}); set finetune: true to start from these weights")
                return {}
            state = ck.load_trainer_state(directory)
            step = state["step"]
            _check_resumed_keys(lines, cfg, state, directory)
            if step > cfg.rl_config.train_iters:
                lines.append(f"actor_config.load: {os.path.join(directory, ck.TRAINER_STATE)}: step {step} is beyond "
                             f"rl_config.train_iters={cfg.rl_config.train_iters}: nothing is left to train; raise "
                             f"rl_config.train_iters, or load an earlier checkpoint")
            trained = [("policy", actor)] + ([("critic", cfg.critic_config)] if cfg.critic_config is not None else [])
            for role, section in trained:
                check_resumed_adapter(lines, role, "actor_config" if role == "policy" else "critic_config", section,
                                      directory)
                if not section.no_load_optim:  # each role restores its optimizer unless its own section says no
                    part = ck.role_dir(directory, role)
                    verify_checkpoint(directory, lambda rel, p=part: os.path.join(directory, rel) ==
                                      os.path.join(p, ck.OPTIMIZER))
            return state.get("data") or {}
        except CheckpointError as err:
            lines.append(f"actor_config.load: {err}")
    return {}


def check_resumed_adapter(lines: List[str], role: str, section_name: str, section, directory: str) -> None:
    """A resumed role (its checkpoint part ``role``, its config section ``section``) trains what the run being
    resumed trained: LoRA adapters of the same shape on a base that is still there (the one its
    adapter_config.json names), or the whole model."""
    from mindrl.config.plan import lora_spec
    from mindrl.models.lora import ADAPTER_CONFIG, base_changed, read_peft_adapter
    key = f"{section_name}.lora_rank"
    adapter = os.path.join(ck.role_dir(directory, role), "adapter")
    if not os.path.isfile(os.path.join(adapter, ADAPTER_CONFIG)):
        if section.lora_rank:
            lines.append(f"{key}: {section.lora_rank}, but the run being resumed trained its {role} whole ({adapter} "
                         f"does not exist): set lora_rank: 0 to resume it, or finetune: true to put new adapters on "
                         f"its weights")
        return
    config, _ = read_peft_adapter(adapter, tensors=False)
    if not section.lora_rank:
        lines.append(f"{key}: 0, but the run being resumed trained LoRA adapters on its {role} ({adapter}): set "
                     f"lora_rank: {config['r']} (with its lora_alpha and lora_target_modules) to resume it, or "
                     f"finetune: true to train its merged model whole")
        return
    want = lora_spec(section, 0)
    have = (int(config["r"]), float(config["lora_alpha"]), tuple(config["target_modules"]))
    if have != (want.rank, want.alpha, want.targets):
        lines.append(f"{key}: the run being resumed trained adapters r={have[0]}, alpha={have[1]:g} on "
                     f"{', '.join(have[2])} ({adapter}); this config asks for r={want.rank}, alpha={want.alpha:g} on "
                     f"{', '.join(want.targets)}: resume with the same, or set finetune: true")
    verify_checkpoint(directory, lambda rel: os.path.join(directory, rel).startswith(adapter + os.sep))
    changed = base_changed(adapter)
    if changed:
        lines.append(f"{section_name}.load: {adapter}: {changed}: a LoRA run resumes from that base plus the adapter "
                     f"(put the original base back at that path, or start a new run from the checkpoint's merged "
                     f"model with finetune: true)")


def _check_reference(lines: List[str], cfg, policy) -> None:
    """The reference model (built when rl_config.kl_coef > 0) reads the policy's token ids, so it has the policy's
    vocabulary, and the weights it is given fit its model config."""
    if cfg.rl_config.kl_coef <= 0 or policy is None:
        return
    try:
        reference = load_model_config(cfg.ref.model)
    except ModelConfigError as err:
        lines.append(f"ref.model: {err}")
        return
    if reference.vocab_size != policy.vocab_size:
        lines.append(f"ref.model: {cfg.ref.model} has vocab_size {reference.vocab_size}, the policy "
                     f"{policy.vocab_size}; the KL compares the two token by token")
    if cfg.ref.ref_model_load_path:
        _check_shapes(lines, "ref.ref_model_load_path", cfg.ref.ref_model_load_path, expected_tensors(reference),
                      need_head=False)


def _check_memory(lines: List[str], policy) -> None:
    """A model whose float32 weights alone do not fit in this machine's memory cannot run here (a typo such as
    vocab_size: 100000000000000 would otherwise fail with a MemoryError after a long build). Device memory on Ascend or
    GPU is not known before MindSpore starts, so only host memory is checked, where the CPU backend keeps everything."""
    params = sum(int(np.prod(shape)) for shape in expected_tensors(policy).values())
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return
    if 4 * params > total:
        lines.append(f"actor_config.model: {policy.source}: {params:,} parameters take {4 * params / 2**30:,.1f} GiB in "
                     f"float32, more than this machine's {total / 2**30:.1f} GiB of memory; check its sizes")


def _check_resumed_keys(lines: List[str], cfg, state: dict, directory: str) -> None:
    """A resume continues the run it names: the keys that decide its prompts and samples must be the ones it ran
    with (a checkpoint saved before they were recorded is not checked)."""
    saved = state.get("resume_keys") or {}
    now = resume_keys(cfg)
    rng_keys = ("runtime.seed", "generate_config.seed")  # a fresh RNG (no_load_rng) may have a new seed
    for key, value in now.items():
        if key in rng_keys and cfg.actor_config.no_load_rng and cfg.data.seed == saved.get("data.seed"):
            continue
        if key in saved and saved[key] != value:
            lines.append(f"{key}: {value!r}, but the run {directory} resumes ran with {saved[key]!r}: a resume continues "
                         f"the same prompts and samples; set it back, or start a new run from these weights "
                         f"(actor_config.finetune=true actor_config.load={directory})")


def _check_lengths(lines: List[str], cfg, policy) -> None:
    """The tokenizer's ids fit the model's embedding; prompt plus response fit the model's context."""
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


def _check_data(lines: List[str], cfg, policy, resumed: dict) -> None:
    """Every prompt of the training (and held-out) set fits max_prompt_length and the model's vocabulary: a row
    that does not would otherwise stop the run when its batch is drawn, hours in, or train on garbage."""
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
        rows = resumed.get("num_samples") if key == "data.path" else None
        if rows is not None and rows != stats["rows"]:
            lines.append(f"data.path: {path} holds {stats['rows']} prompts, but the run being resumed read a file of "
                         f"{rows}: a resume continues the same order; give that file, or start a new run from the "
                         f"checkpoint's weights (actor_config.finetune=true)")
        need = cfg.rl_config.gen_batch_size or cfg.rl_config.global_batch_size
        if key == "data.path" and stats["rows"] < need:
            lines.append(f"data.path: {path} holds {stats['rows']} prompts, fewer than one generation batch of {need} "
                         f"(rl_config.{'gen_batch_size' if cfg.rl_config.gen_batch_size else 'global_batch_size'}); "
                         f"lower it or give more data")
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
    from mindrl.data.preprocess import PreprocessError  # here: half a second (tokenizers, jinja) for one class
    ev, gen = cfg.eval, cfg.generate_config
    try:
        prompts, _ = load_eval_set(ev.path, cfg.data.prompt_key, cfg.data.label_key, None,  # every row, not a subset
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
    configs = [policy] + ([load_model_config(cfg.critic_config.model)] if cfg.critic_config is not None else [])
    params = sum(int(np.prod(shape)) for c in configs for shape in expected_tensors(c).values())
    return 12 * params * (1 + (world if world > 1 else 0))


def _check_outputs(lines: List[str], cfg, policy, world: int) -> None:
    """The run can write where it will write (save, log_dir), and save can hold one checkpoint: found now, not at
    the first save (with save_interval 0, after the whole run)."""
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
