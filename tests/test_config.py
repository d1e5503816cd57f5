"""Tests for mindrl.config: defaults, aliases, overrides, error messages, fingerprints."""
import copy
import dataclasses
import typing
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mindrl.config import (
    ALIASES,
    SECTIONS,
    ConfigError,
    TrainConfig,
    train_config_from_dict,
    load_train_config,
    parse_yaml,
)

REPO = Path(__file__).resolve().parents[1]

BASE = {
    "actor_config": {"model": "model_configs/tiny.yaml", "tokenizer_name_or_path": "tok"},
    "data": {"path": "train.mindrecord"},
}


@pytest.fixture
def ws(tmp_path, monkeypatch):
    """A working directory holding every file a valid config points at."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model_configs").mkdir()
    (tmp_path / "model_configs" / "tiny.yaml").write_text("hidden_size: 8\n")
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text("{}")
    for name in ("train.mindrecord", "train.mindrecord.db", "heldout.mindrecord",
                 "heldout.mindrecord.db", "heldout.jsonl"):
        (tmp_path / name).write_text("")
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    (tmp_path / "hf" / "tokenizer.model").write_text("")
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "w.safetensors").write_text("")
    (tmp_path / "reward.py").write_text("def score(x):\n    return 0.0\n")
    return tmp_path


def merged(extra=None, drop=()):
    """BASE updated section-wise with ``extra``; ``drop`` lists dotted keys to delete."""
    data = copy.deepcopy(BASE)
    for section, values in (extra or {}).items():
        if isinstance(values, dict) and isinstance(data.get(section), dict):
            data[section].update(values)
        else:
            data[section] = values
    for dotted in drop:
        parts = dotted.split(".")
        node = data
        for p in parts[:-1]:
            node = node[p]
        del node[parts[-1]]
    return data


def write(ws, data, name="cfg.yaml"):
    path = ws / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return name


def load(ws, extra=None, overrides=(), drop=()):
    return load_train_config(write(ws, merged(extra, drop)), overrides)


def error(ws, extra=None, overrides=(), drop=(), text=None):
    name = write(ws, text if text is not None else merged(extra, drop))
    with pytest.raises(ConfigError) as info:
        load_train_config(name, overrides)
    return str(info.value)


def assert_error(msg, key, *fragments):
    """``msg`` has a line naming the file and ``key`` that contains every fragment."""
    lines = [line for line in msg.splitlines() if line.startswith(f"cfg.yaml: {key}: ")]
    assert lines, f"no error line for {key!r} in:\n{msg}"
    assert any(all(f in line for f in fragments) for line in lines), \
        f"{fragments} not all in any of {lines}"


# ---------------------------------------------------------------------------------------------
# defaults and full configs

EXPECTED_DEFAULTS = {
    "rl_config": dict(
        adv_estimator="grpo", policy_loss="vanilla", n_samples_per_prompt=8, global_batch_size=16,
        mini_batch_size=16, micro_batch_size=8, actor_forward_micro_batch_size=None, ref_forward_micro_batch_size=None,
        pad_to_multiple_of=0, ppo_epochs=1, shuffle_minibatch=True, train_iters=100, clip_ratio=0.2,
        clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=None, kl_penalty="low_var_kl", kl_coef=0.0,
        use_kl_in_reward=False, use_kl_in_loss=True, kl_ctrl_type="fixed", kl_target=0.1, kl_horizon=10000,
        entropy_coeff=0.0, loss_agg_mode="token-mean", norm_adv_by_std=True,
        rule_reward=None, verifier_function=["math_acc"], verifier_weight=[1.0], custom_reward_file=None,
        verifier_timeout=5.0, reward_fallback=None, dynamic_sampling=False, dynamic_sampling_metric=None,
        gen_batch_size=None, max_num_gen_batches=4, partial_rollout_max_split=1, share_prompt=None, tis_cap=None,
        overlong_buffer_len=0, overlong_penalty_factor=1.0, mask_truncated_completions=False,
        gamma=1.0, lam=0.95, advantage_whiten=True, cliprange_value=0.5, critic_warmup=0,
        reward_clip_range=None, max_bad_steps=3, pretrain_coef=0.0),
    "critic_config": None,
    "reward_config": None,
    "actor_config": dict(
        model="model_configs/tiny.yaml", tokenizer_name_or_path="tok", load=None, save=None,
        finetune=True, no_load_optim=False, no_load_rng=False, save_interval=0, keep_last=2, save_best=None,
        lr=1e-6, min_lr=0.0, lr_decay_style="constant", lr_warmup_iters=0,
        lr_warmup_fraction=None, weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.999,
        adam_eps=1e-8, clip_grad=1.0, tensor_model_parallel_size=1, compute_dtype=None, lora_rank=0,
        lora_alpha=16.0, lora_dropout=0.0, lora_target_modules=["all-linear"], recompute_granularity=None,
        recompute_method=None, recompute_num_layers=None, layer_graphs=False),
    "ref": dict(ref_model_load_path=None, model=None),  # no KL term: no reference model
    "generate_config": dict(
        max_prompt_length=512, max_tokens=256, min_tokens=0, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
        repetition_penalty=1.0, stop_token_ids=[], infer_tensor_parallel_size=1,
        infer_data_parallel_size=None, max_num_seqs=None, micro_batch_size=None, seed=None),
    "data": dict(path="train.mindrecord", shuffle=True, seed=1234, prompt_key="prompt_ids",
                 label_key="labels", ptx_path=None),
    "logging": dict(log_dir="runs/cfg/<run_id>", name="cfg", run_id=None, jsonl=True, tensorboard=True, log_interval=1,
                    progress_bar=True, log_max_throughput=True),
    "runtime": dict(mode="graph", enable_compile_cache=False,
                    compile_cache_path="./.compile_cache", only_save_strategy=False,
                    strategy_dir="./strategy", threads=None, seed=1234, world_size=None),
    "eval": dict(path=None, dataset_config=None, interval=0, num_samples=None, max_tokens=None, n_samples=1,
                 temperature=0.0, top_p=1.0),
}


def test_minimal_config_gets_documented_defaults(ws):
    cfg = load(ws)
    assert isinstance(cfg, TrainConfig)
    assert cfg.resolved_dict() == EXPECTED_DEFAULTS
    assert list(cfg.resolved_dict()) == list(SECTIONS)
    assert isinstance(cfg.rl_config.clip_ratio, float) and isinstance(cfg.actor_config.lr, float)


FULL = {
    "rl_config": dict(
        # one consistent config: keys other estimators read (gamma, lam, advantage_whiten) keep their
        # defaults, as does clip_ratio (both of its sides are given); each is tested on its own below
        adv_estimator="grpo", policy_loss="vanilla", n_samples_per_prompt=4, global_batch_size=8,
        mini_batch_size=4, micro_batch_size=4, actor_forward_micro_batch_size=2, ref_forward_micro_batch_size=8,
        pad_to_multiple_of=8, ppo_epochs=2, shuffle_minibatch=False, train_iters=50, clip_ratio=0.2,
        clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0, kl_penalty="k3", kl_coef=0.01,
        use_kl_in_reward=True, use_kl_in_loss=False, kl_ctrl_type="adaptive", kl_target=0.5, kl_horizon=500,
        entropy_coeff=0.001, loss_agg_mode="seq-mean-token-sum-norm",
        norm_adv_by_std=False, rule_reward=True, verifier_function=["acc", "format"], verifier_weight=[1.0, 0.5],
        custom_reward_file="reward.py", verifier_timeout=2.5, reward_fallback=0.0, dynamic_sampling=True,
        dynamic_sampling_metric="acc", gen_batch_size=16, max_num_gen_batches=3,
        partial_rollout_max_split=1, share_prompt=False, tis_cap=2.0, overlong_buffer_len=32,
        overlong_penalty_factor=0.5,
        mask_truncated_completions=True, gamma=1.0, lam=0.95, advantage_whiten=True, cliprange_value=0.5,
        critic_warmup=0, reward_clip_range=[-5.0, 5.0], max_bad_steps=5, pretrain_coef=0.1),
    "actor_config": dict(
        model="hf", tokenizer_name_or_path="hf", load="ckpt", save="out", finetune=False,
        no_load_optim=True, no_load_rng=True, save_interval=10, keep_last=0, save_best="eval/acc/mean", lr=1e-5,
        min_lr=1e-7, lr_decay_style="cosine", lr_warmup_iters=0, lr_warmup_fraction=0.1,
        weight_decay=0.01, adam_beta1=0.8, adam_beta2=0.95, adam_eps=1e-6, clip_grad=0.5,
        tensor_model_parallel_size=2, compute_dtype="bfloat16", lora_rank=0, lora_alpha=32.0, lora_dropout=0.0,
        lora_target_modules=["q_proj", "v_proj"], recompute_granularity="full", recompute_method="block",
        recompute_num_layers=1, layer_graphs=False),  # rank 0, given: LoRA's other keys kept for a later run
    "ref": dict(ref_model_load_path="w.safetensors", model="model_configs/tiny.yaml"),
    "generate_config": dict(
        max_prompt_length=256, max_tokens=128, min_tokens=4, do_sample=True, temperature=0.7, top_k=50,
        top_p=0.9, repetition_penalty=1.1, stop_token_ids=[7, 8], infer_tensor_parallel_size=2,
        infer_data_parallel_size=4, max_num_seqs=16, micro_batch_size=16, seed=5),
    "data": dict(path="train.mindrecord", shuffle=False, seed=7, prompt_key="p", label_key="y",
                 ptx_path="train.mindrecord"),
    "logging": dict(log_dir="logs/<name>/<run_id>", name="exp1", run_id="x", jsonl=False, tensorboard=False,
                    log_interval=5, progress_bar=False, log_max_throughput=False),
    "runtime": dict(mode="pynative", enable_compile_cache=True, compile_cache_path="cc",
                    only_save_strategy=True, strategy_dir="st", threads=2, seed=99, world_size=8),
    "eval": dict(path="heldout.jsonl", dataset_config=None, interval=10, num_samples=100, max_tokens=64, n_samples=8,
                 temperature=0.8, top_p=0.95),
}


# PPO with a reward model: the sections and keys FULL (a GRPO run) cannot set without them being ignored
FULL_PPO = merged({
    "rl_config": dict(adv_estimator="gae", n_samples_per_prompt=1, global_batch_size=16, mini_batch_size=8,
                      micro_batch_size=4, gamma=0.99, lam=0.9, advantage_whiten=False, cliprange_value=0.2,
                      critic_warmup=3, verifier_function=["format"], verifier_weight=[0.5]),
    "actor_config": dict(save="out"),
    "critic_config": dict(
        model="hf", load="hf", save="out", finetune=True, no_load_optim=True, no_load_rng=False, lr=2e-6,
        min_lr=1e-7, lr_decay_style="cosine", lr_warmup_iters=2, lr_warmup_fraction=None, weight_decay=0.01,
        adam_beta1=0.8, adam_beta2=0.95, adam_eps=1e-6, clip_grad=0.5, tensor_model_parallel_size=2,
        micro_batch_size=2, loss_agg_mode="token-mean-per-micro-batch", compute_dtype="float32", lora_rank=8,
        lora_alpha=16.0, lora_dropout=0.0, lora_target_modules=["linear_proj", "linear_fc2"],
        recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1, layer_graphs=False),
    "reward_config": dict(load="hf", model="hf", tensor_model_parallel_size=2, micro_batch_size=8, weight=0.5,
                          normalize=True, layer_graphs=False),
})


def test_every_key_is_accepted_and_kept(ws):
    schema_keys = {s: {f.name for f in dataclasses.fields(cfg_cls)}
                   for s, cfg_cls in typing.get_type_hints(TrainConfig).items()
                   for cfg_cls in [typing.get_args(cfg_cls)[0] if typing.get_args(cfg_cls) else cfg_cls]}
    covered = {s: set(v) for s, v in FULL.items()}
    for s in ("critic_config", "reward_config"):
        covered[s] = set(FULL_PPO[s])
    assert covered == schema_keys  # FULL and FULL_PPO cover the schema
    cfg = load_train_config(write(ws, FULL))
    expected = copy.deepcopy(FULL)
    expected["logging"]["log_dir"] = "logs/exp1/<run_id>"  # the run id goes in when the run claims its directory
    assert cfg.resolved_dict() == {**expected, "critic_config": None, "reward_config": None}
    ppo = load_train_config(write(ws, FULL_PPO, name="ppo.yaml"))
    for section in ("critic_config", "reward_config"):
        assert getattr(ppo, section).__dict__ == FULL_PPO[section]
    for key, value in FULL_PPO["rl_config"].items():
        assert getattr(ppo.rl_config, key) == value, key


def test_to_yaml_round_trips(ws):
    cfg = load_train_config(write(ws, FULL), ["logging.name=1e5"])
    assert cfg.logging.name == "1e5"
    again = load_train_config(write(ws, cfg.to_yaml(), name="saved.yaml"))
    assert again == cfg
    assert yaml.safe_load(cfg.to_yaml()) == cfg.to_dict()  # plain PyYAML reads it the same
    ppo = load_train_config(write(ws, FULL_PPO, name="ppo.yaml"))
    assert load_train_config(write(ws, ppo.to_yaml(), name="saved_ppo.yaml")) == ppo


@pytest.mark.parametrize("example", ["examples/grpo/tiny_math.yaml", "examples/ppo/tiny_math.yaml",
                                     "examples/ppo/tiny_math_rm.yaml", "examples/mindspeed_rl/grpo_tiny_math.yaml",
                                     "examples/grpo/qwen25_7b_math17k.yaml"])
def test_config_from_dict_of_to_dict_round_trips(example):
    """Issue 23: config_from_dict(cfg.to_dict()) failed (`reward_config.load: missing required key`, absent sections
    came back as None, and every resolved key came back as one the user gave). A MindSpeed-RL file comes back as
    mindrl's canonical sections."""
    cfg = load_train_config(REPO / example, check_paths=False)
    again = train_config_from_dict(cfg.to_dict(), check_paths=False)
    assert again == cfg
    assert "megatron_training" not in cfg.to_dict()
    if example.endswith("grpo/tiny_math.yaml"):  # derived values are derived again: an override moves them
        moved = train_config_from_dict(cfg.to_dict(), ["runtime.seed=7", "rl_config.clip_ratio=0.3"],
                                       check_paths=False)
        assert moved.data.seed == 7 and moved.rl_config.clip_ratio_high == 0.3


def test_yaml_flavour():
    doc = parse_yaml("a: 1e-5\nb: yes\nc: True\nd: 1.5e3\ne: off\nf: 10\n"
                     "g: &s {x: 1, y: 2}\nh: {<<: *s, y: 3}\n")
    assert doc == {"a": 1e-5, "b": "yes", "c": True, "d": 1500.0, "e": "off", "f": 10,
                   "g": {"x": 1, "y": 2}, "h": {"x": 1, "y": 3}}


def test_derived_defaults_follow_other_keys(ws):
    cfg = load(ws, {"rl_config": {"global_batch_size": 4, "n_samples_per_prompt": 2,
                                  "micro_batch_size": 2, "clip_ratio": 0.3,
                                  "adv_estimator": "dr_grpo"},
                    "runtime": {"seed": 5}, "generate_config": {"max_tokens": 99},
                    "actor_config": {"load": "hf"}, "eval": {"path": "heldout.jsonl"}},
               overrides=["rl_config.kl_coef=0.01"])
    assert cfg.rl_config.mini_batch_size == 4  # null: the whole step's prompts, one update
    assert (cfg.rl_config.clip_ratio_low, cfg.rl_config.clip_ratio_high) == (0.3, 0.3)
    assert cfg.rl_config.norm_adv_by_std is False  # dr_grpo turns it off
    assert cfg.data.seed == 5 and cfg.eval.max_tokens == 99
    assert cfg.ref.ref_model_load_path == "hf"  # null -> actor_config.load (a KL term needs a reference)
    assert cfg.rl_config.verifier_function == ["math_acc"] and cfg.rl_config.verifier_weight == [1.0]


def test_reinforce_plus_plus_allows_one_sample_per_prompt(ws):
    cfg = load(ws, {"rl_config": {"adv_estimator": "reinforce_plus_plus", "n_samples_per_prompt": 1,
                                  "global_batch_size": 16, "gamma": 0.99}})
    assert cfg.rl_config.mini_batch_size == 16 and cfg.rl_config.gamma == 0.99


# ---------------------------------------------------------------------------------------------
# aliases

def test_aliases_map_to_canonical_keys(ws):
    mindspeed_style = merged({
        "seed": 42,
        "rl_config": {"algorithm": "grpo", "init_kl_coef": 0.05, "max_prompt_length": 100,
                      "use_tensorboard": False,
                      "integrated_mode_config": {"ref_model_load_path": "hf"}},
        "generate_config": {"sampling_config": {"max_tokens": 64, "temperature": 0.6,
                                                "top_p": 0.95, "top_k": 20, "min_tokens": 1,
                                                "repetition_penalty": 1.05}},
    })
    canonical = merged({
        "runtime": {"seed": 42},
        "rl_config": {"adv_estimator": "grpo", "kl_coef": 0.05},
        "logging": {"tensorboard": False},
        "ref": {"ref_model_load_path": "hf"},
        "generate_config": {"max_prompt_length": 100, "max_tokens": 64, "temperature": 0.6,
                            "top_p": 0.95, "top_k": 20, "min_tokens": 1,
                            "repetition_penalty": 1.05},
    })
    a = load_train_config(write(ws, mindspeed_style))
    b = load_train_config(write(ws, canonical, name="canon.yaml"), ["logging.name=cfg"])
    assert a == b
    assert a.fingerprint() == b.fingerprint()
    assert a.ref.ref_model_load_path == "hf" and a.runtime.seed == 42 and a.data.seed == 42


def test_adv_estimator_accepts_mindspeed_value(ws):
    cfg = load(ws, {"rl_config": {"adv_estimator": "group_norm"}})
    assert cfg.rl_config.adv_estimator == "grpo"


def test_alias_conflict_is_an_error(ws):
    msg = error(ws, {"rl_config": {"algorithm": "dr_grpo", "adv_estimator": "grpo"}})
    assert_error(msg, "rl_config.algorithm", "conflicts with rl_config.adv_estimator")


def test_unknown_key_inside_alias_container(ws):
    msg = error(ws, {"rl_config": {"integrated_mode_config": {"ref_model_load_pth": "hf"}}})
    assert_error(msg, "rl_config.integrated_mode_config.ref_model_load_pth", "did you mean",
                 "ref_model_load_path")


# ---------------------------------------------------------------------------------------------
# errors: each names the file and the dotted key

@pytest.mark.parametrize("extra, key, fragments", [
    # unknown keys and sections
    ({"rl_config": {"kl_coeff": 0.1}}, "rl_config.kl_coeff",
     ["unknown key", "did you mean 'rl_config.kl_coef'?"]),
    ({"rl_config": {"lr": 0.1}}, "rl_config.lr", ["did you mean 'actor_config.lr'?"]),
    ({"generat_config": {"top_p": 0.5}}, "generat_config",
     ["unknown section", "did you mean 'generate_config'?"]),
    ({"megatron_training": {"global_batch_size": 4}}, "actor_config.micro_batch_size",
     ["MindSpeed-RL needs it"]),  # a megatron_training section makes it MindSpeed-RL's file, with its rules
    # wrong types
    ({"rl_config": {"global_batch_size": "abc"}}, "rl_config.global_batch_size",
     ["expected an integer", "'abc'"]),
    ({"rl_config": {"global_batch_size": 16.5}}, "rl_config.global_batch_size",
     ["expected an integer", "16.5"]),
    ({"rl_config": {"global_batch_size": True}}, "rl_config.global_batch_size",
     ["expected an integer", "true (boolean)"]),
    ({"rl_config": {"kl_coef": "high"}}, "rl_config.kl_coef", ["expected a number"]),
    ({"rl_config": {"kl_coef": None}}, "rl_config.kl_coef", ["must not be null"]),
    ({"rl_config": {"dynamic_sampling": "maybe"}}, "rl_config.dynamic_sampling",
     ["expected true or false", "'maybe'"]),
    ({"rl_config": {"verifier_function": "acc"}}, "rl_config.verifier_function",
     ["expected a list"]),
    ({"rl_config": {"verifier_weight": [1.0, "x"]}}, "rl_config.verifier_weight[1]",
     ["expected a number"]),
    ({"actor_config": {"tokenizer_name_or_path": 12}}, "actor_config.tokenizer_name_or_path",
     ["expected a string"]),
    ({"data": {"prompt_key": ""}}, "data.prompt_key", ["must not be empty"]),
    ({"eval": [1, 2]}, "eval", ["expected a mapping"]),
    # bounds
    ({"rl_config": {"micro_batch_size": -4}}, "rl_config.micro_batch_size", ["must be >= 1", "-4"]),
    ({"generate_config": {"top_p": 1.5}}, "generate_config.top_p", ["must be in (0, 1]", "1.5"]),
    ({"generate_config": {"temperature": 0}}, "generate_config.temperature", ["must be > 0"]),
    ({"rl_config": {"gamma": 1.2}}, "rl_config.gamma", ["must be in [0, 1]"]),
    ({"rl_config": {"clip_ratio_c": 1.0}}, "rl_config.clip_ratio_c", ["must be > 1"]),
    ({"generate_config": {"stop_token_ids": [3, -1]}}, "generate_config.stop_token_ids[1]",
     ["must be >= 0"]),
    ({"actor_config": {"lr": float("nan")}}, "actor_config.lr", ["finite"]),
    # choices
    ({"rl_config": {"kl_penalty": "foo"}}, "rl_config.kl_penalty",
     ["invalid value 'foo'", "kl, k1, mse, k2, low_var_kl, k3, abs"]),
    ({"rl_config": {"adv_estimator": "GRPO"}}, "rl_config.adv_estimator",
     ["grpo, dr_grpo, rloo, reinforce_plus_plus, reinforce_plus_plus_baseline, gae", "did you mean 'grpo'?"]),
    ({"runtime": {"mode": "eager"}}, "runtime.mode", ["graph, pynative"]),
    ({"actor_config": {"compute_dtype": "bf16"}}, "actor_config.compute_dtype", ["bfloat16"]),
    # rules spanning several keys
    ({"rl_config": {"global_batch_size": 64, "n_samples_per_prompt": 8, "mini_batch_size": 48}},
     "rl_config.mini_batch_size", ["48 does not divide global_batch_size = 64"]),
    ({"rl_config": {"global_batch_size": 64, "n_samples_per_prompt": 8, "mini_batch_size": 256}},
     "rl_config.mini_batch_size", ["256 is more than global_batch_size = 64", "it counts prompts per update",
                                   "256 responses are 32 prompts"]),
    ({"rl_config": {"mini_batch_size": 4, "micro_batch_size": 12}}, "rl_config.micro_batch_size",
     ["12 does not divide an update's 4 prompts x 8 samples = 32 responses"]),
    ({"rl_config": {"n_samples_per_prompt": 1}}, "rl_config.n_samples_per_prompt",
     ["must be >= 2", "'grpo'"]),
    ({"rl_config": {"verifier_function": ["acc", "format"], "verifier_weight": [1.0]}}, "rl_config.verifier_weight",
     ["has 1 entries but verifier_function has 2"]),
    ({"rl_config": {"verifier_function": ["acc", "acc"], "verifier_weight": [1, 1]}},
     "rl_config.verifier_function", ["more than once"]),
    ({"rl_config": {"adv_estimator": "dr_grpo", "norm_adv_by_std": True}},
     "rl_config.norm_adv_by_std", ["must be false", "dr_grpo"]),
    ({"rl_config": {"overlong_buffer_len": 256}}, "rl_config.overlong_buffer_len",
     ["smaller than generate_config.max_tokens = 256"]),
    ({"actor_config": {"finetune": False}}, "actor_config.load",
     ["required when finetune is false"]),
    ({"actor_config": {"finetune": False, "load": "w.safetensors"}}, "actor_config.load",
     ["checkpoint directory"]),
    ({"actor_config": {"finetune": False, "load": "ckpt"}, "rl_config": {"kl_coef": 0.1}},
     "ref.ref_model_load_path", ["original weights"]),
    ({"actor_config": {"lr_warmup_iters": 5, "lr_warmup_fraction": 0.1}},
     "actor_config.lr_warmup_fraction", ["lr_warmup_iters"]),
    ({"actor_config": {"min_lr": 1e-3}}, "actor_config.min_lr", ["larger than lr"]),
    ({"actor_config": {"save_interval": 10}}, "actor_config.save_interval",
     ["actor_config.save is not set"]),
    ({"generate_config": {"min_tokens": 300}}, "generate_config.min_tokens", ["max_tokens = 256"]),
    ({"generate_config": {"micro_batch_size": 2}, "rl_config": {"n_samples_per_prompt": 4}},
     "generate_config.micro_batch_size", ["cannot hold one prompt's", "n_samples_per_prompt = 4", "at least 4"]),
    ({"generate_config": {"max_num_seqs": 2}, "rl_config": {"n_samples_per_prompt": 4}},
     "generate_config.max_num_seqs", ["cannot hold one prompt's", "at least 4"]),
    ({"generate_config": {"max_num_seqs": 16, "micro_batch_size": 8}},
     "generate_config.micro_batch_size", ["differs from max_num_seqs = 16", "set one of them"]),
    # files
    ({"actor_config": {"model": "model_configs/nope.yaml"}}, "actor_config.model",
     ["not found", "'model_configs/nope.yaml'", "resolved against"]),
    ({"actor_config": {"model": "nope"}}, "actor_config.model", ["model_configs/nope.yaml"]),
    ({"actor_config": {"model": "tok"}}, "actor_config.model", ["no config.json"]),
    ({"actor_config": {"tokenizer_name_or_path": "missing_tok"}},
     "actor_config.tokenizer_name_or_path", ["tokenizer not found", "'missing_tok'"]),
    ({"actor_config": {"tokenizer_name_or_path": "ckpt"}}, "actor_config.tokenizer_name_or_path",
     ["tokenizer.json"]),
    ({"actor_config": {"load": "gone"}}, "actor_config.load", ["checkpoint not found", "'gone'"]),
    ({"data": {"path": "other.mindrecord"}}, "data.path", ["dataset not found"]),
    ({"data": {"path": "heldout.jsonl"}}, "data.path", ["mindrl preprocess"]),
    ({"eval": {"path": "missing.jsonl"}}, "eval.path", ["dataset not found"]),
    ({"ref": {"ref_model_load_path": "orig"}}, "ref.ref_model_load_path",
     ["reference weights not found", "'orig'"]),
    ({"rl_config": {"custom_reward_file": "rw.py"}}, "rl_config.custom_reward_file",
     ["reward file not found"]),
    ({"rl_config": {"custom_reward_file": "tok"}}, "rl_config.custom_reward_file",
     ["expected file.py, file.py:function or package.module:function"]),
])
def test_error_names_file_and_key(ws, extra, key, fragments):
    assert_error(error(ws, extra), key, *fragments)


def test_warmup_longer_than_training_is_said_once_in_the_plan(ws, caplog):
    """A short trial of a long config is legal; the run plan (printed once, by rank 0, after `run directory:`) says
    that the lr never leaves warm-up. Loading the config logs nothing: it warned at every load (twice through the
    Python API, once per msrun worker, before `run directory:`)."""
    from mindrl.config.plan import plan_run
    with caplog.at_level("WARNING"):
        cfg = load(ws, {"actor_config": {"lr_warmup_iters": 500, "lr": 1e-4}, "rl_config": {"train_iters": 5}})
    assert caplog.records == []
    policy = [line for line in plan_run(cfg, 1).lines() if line.startswith("    policy: ")]
    assert len(policy) == 1 and policy[0].endswith(
        "; learning rate 0.0001, constant, after 500 warm-up steps; the run's 5 steps end inside the warm-up, so the "
        "rate peaks at 1e-06"), policy
    plain = plan_run(load(ws, {"actor_config": {"lr": 1e-4}}), 1).text()
    assert "; learning rate 0.0001, constant\n" in plain + "\n" and "warm-up" not in plain


@pytest.mark.parametrize("dotted", ["actor_config.model", "actor_config.tokenizer_name_or_path",
                                    "data.path"])
def test_missing_required_key(ws, dotted):
    assert_error(error(ws, drop=[dotted]), dotted, "missing required key")


def test_missing_required_section(ws):
    msg = error(ws, drop=["data"])
    assert_error(msg, "data.path", "missing required key")


def test_missing_mindrecord_index(ws):
    (ws / "train.mindrecord.db").unlink()
    assert_error(error(ws), "data.path", "train.mindrecord.db")


def test_all_problems_reported_together(ws):
    msg = error(ws, {"rl_config": {"kl_coeff": 1, "ppo_epochs": 0},
                     "generate_config": {"top_k": -2}})  # -1 is vLLM's "off", mindrl's 0
    assert len(msg.splitlines()) == 3
    assert_error(msg, "rl_config.kl_coeff", "unknown key")
    assert_error(msg, "rl_config.ppo_epochs", ">= 1")
    assert_error(msg, "generate_config.top_k", ">= 0")


@pytest.mark.parametrize("text, fragments", [
    ("rl_config:\n  kl_coef: 0.1\n  kl_coef: 0.2\n", ["duplicate key 'kl_coef'"]),
    ("rl_config: [unclosed\n", ["invalid YAML"]),
    ("- a\n- b\n", ["top level"]),
])
def test_malformed_yaml(ws, text, fragments):
    msg = error(ws, text=text)
    assert msg.startswith("cfg.yaml: ")
    assert all(f in msg for f in fragments), msg


def test_missing_config_file(ws):
    with pytest.raises(ConfigError, match=r"^nowhere\.yaml: config file not found"):
        load_train_config("nowhere.yaml")


def test_relative_paths_resolve_against_cwd(ws, tmp_path_factory, monkeypatch):
    name = write(ws, merged())
    assert load_train_config(name).data.path == "train.mindrecord"
    other = tmp_path_factory.mktemp("elsewhere")
    monkeypatch.chdir(other)
    with pytest.raises(ConfigError) as info:
        load_train_config(ws / name)
    msg = str(info.value)
    assert f"{ws / name}: data.path: dataset not found: 'train.mindrecord'" in msg
    assert str(other) in msg


def test_model_name_and_home_expansion(ws, monkeypatch):
    monkeypatch.setenv("HOME", str(ws))
    cfg = load(ws, {"actor_config": {"model": "tiny", "tokenizer_name_or_path": "~/tok"},
                    "rl_config": {"kl_coef": 0.1}})
    assert cfg.actor_config.model == "model_configs/tiny.yaml"
    assert cfg.ref.model == "model_configs/tiny.yaml"
    assert cfg.actor_config.tokenizer_name_or_path == str(ws / "tok")


def test_check_paths_off_and_from_dict(ws):
    data = merged({"actor_config": {"model": "absent", "tokenizer_name_or_path": "absent"},
                   "data": {"path": "absent.mindrecord"}})
    cfg = train_config_from_dict(data, ["rl_config.kl_coef=0.5"], check_paths=False)
    assert cfg.rl_config.kl_coef == 0.5 and cfg.logging.name == "run"
    assert data["actor_config"]["model"] == "absent"  # input left untouched
    with pytest.raises(ConfigError, match=r"^<dict>: actor_config\.model: "):
        train_config_from_dict(data)


# ---------------------------------------------------------------------------------------------
# overrides

def test_overrides_change_values(ws):
    cfg = load(ws, overrides=[
        "rl_config.kl_coef=0.01",
        "actor_config.lr=1e-5",
        "generate_config.temperature=0.7",
        "rl_config.verifier_function=[acc,format]",
        "rl_config.verifier_weight=[1, 0.5]",
        "generate_config.stop_token_ids=[5,6]",
        "rl_config.dynamic_sampling=true",
        "actor_config.save=out",
        "actor_config.save=out2",  # last one wins
        "eval.path=heldout.jsonl",
        "eval.interval=3",
        "logging.name=007",
        "rl_config.clip_ratio_c=null",
        "rl_config.algorithm=dr_grpo",
        "seed=7",
    ])
    assert cfg.rl_config.kl_coef == 0.01 and cfg.actor_config.lr == 1e-5
    assert cfg.generate_config.temperature == 0.7
    assert cfg.rl_config.verifier_function == ["acc", "format"]
    assert cfg.rl_config.verifier_weight == [1.0, 0.5]
    assert cfg.generate_config.stop_token_ids == [5, 6]
    assert cfg.rl_config.dynamic_sampling is True
    assert cfg.actor_config.save == "out2" and cfg.eval.interval == 3
    assert cfg.logging.name == "007" and cfg.logging.log_dir == "runs/007/<run_id>"
    assert cfg.rl_config.adv_estimator == "dr_grpo" and cfg.rl_config.norm_adv_by_std is False
    assert cfg.runtime.seed == 7 and cfg.data.seed == 7


def test_override_beats_file_and_alias(ws):
    cfg = load(ws, {"rl_config": {"algorithm": "grpo", "kl_coef": 0.2}},
               overrides=["rl_config.adv_estimator=dr_grpo", "rl_config.init_kl_coef=0.3",
                          "rl_config.integrated_mode_config.ref_model_load_path=hf"])
    assert cfg.rl_config.adv_estimator == "dr_grpo" and cfg.rl_config.kl_coef == 0.3
    assert cfg.ref.ref_model_load_path == "hf"


@pytest.mark.parametrize("override, key, fragments", [
    ("rl_config.kl_coeff=0.1", "rl_config.kl_coeff",
     ["unknown key in command-line override", "did you mean 'rl_config.kl_coef'?"]),
    ("rl_config.kl_coef.x=1", "rl_config.kl_coef.x", ["unknown key"]),
    ("rl_config=1", "rl_config", ["override one key inside it"]),
    ("trainer.lr=1", "trainer.lr", ["unknown key"]),
    ("rl_config.global_batch_size=abc", "rl_config.global_batch_size",
     ["expected an integer", "set by command-line override 'rl_config.global_batch_size=abc'"]),
    ("rl_config.verifier_function=[acc", "rl_config.verifier_function", ["cannot parse value"]),
    ("rl_config.use_kl_in_loss=maybe", "rl_config.use_kl_in_loss", ["expected true or false"]),
])
def test_bad_override(ws, override, key, fragments):
    assert_error(error(ws, overrides=[override]), key, *fragments)


def test_override_without_equals(ws):
    msg = error(ws, overrides=["rl_config.kl_coef"])
    assert msg.startswith("cfg.yaml: command-line override 'rl_config.kl_coef'")
    assert "section.key=value" in msg


# ---------------------------------------------------------------------------------------------
# fingerprints

def test_fingerprint_stable_across_key_order(ws):
    forward = merged({"rl_config": {"kl_coef": 0.1, "n_samples_per_prompt": 4},
                      "generate_config": {"top_p": 0.9, "max_tokens": 64}})
    backward = {s: dict(reversed(list(v.items()))) for s, v in reversed(list(forward.items()))}
    backward["rl_config"] = {"algorithm": "grpo", **backward["rl_config"]}
    a = load_train_config(write(ws, forward, "a.yaml"))
    b = load_train_config(write(ws, backward, "b.yaml"), ["logging.name=a"])
    assert a.fingerprint() == b.fingerprint()
    assert a.fingerprint("rl_config", "generate_config") == \
        b.fingerprint("generate_config", "rl_config")
    fp = a.fingerprint("actor_config")
    assert len(fp) == 64 and int(fp, 16) >= 0
    assert fp == a.fingerprint("actor_config")


def test_fingerprint_changes_with_values(ws):
    base = load(ws)
    changed = load(ws, overrides=["generate_config.max_tokens=128"])
    assert base.fingerprint() != changed.fingerprint()
    assert base.fingerprint("generate_config") != changed.fingerprint("generate_config")
    assert base.fingerprint("generate_config.max_tokens") != \
        changed.fingerprint("generate_config.max_tokens")
    assert base.fingerprint("actor_config") == changed.fingerprint("actor_config")
    assert base.fingerprint("rl_config.kl_coef") != base.fingerprint("rl_config.entropy_coeff")
    with pytest.raises(ConfigError, match="unknown config key 'rl_config.nope'"):
        base.fingerprint("rl_config.nope")


# ---------------------------------------------------------------------------------------------
# packaging constraints

def test_import_uses_only_stdlib_yaml_and_numpy():
    # whatever `import yaml` and site startup load is fine; mindrl.config may add only stdlib and numpy (the algorithm
    # registries whose names it accepts): never mindspore, which must not start in msrun's scheduler before init()
    code = ("import sys, yaml; before = set(sys.modules); import mindrl.config; "
            "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
            "new = {m for m in new if not m.startswith(('_cython', 'cython_runtime'))}; "  # numpy's compiled parts
            "print(','.join(sorted(new - set(sys.stdlib_module_names) - {'mindrl', 'numpy'})))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "", f"mindrl.config imported {out.stdout.strip()}"


def test_docs_cover_every_key():
    doc = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    hints = typing.get_type_hints(TrainConfig)
    for section in SECTIONS:
        assert f"`{section}`" in doc, section
        cls = [t for t in typing.get_args(hints[section]) if t is not type(None)] or [hints[section]]
        for f in dataclasses.fields(cls[0]):  # optional sections (critic_config, reward_config) too
            assert f"`{f.name}`" in doc, f"{section}.{f.name} is not documented"
    for alias in ALIASES:
        assert alias in doc, f"alias {alias} is not documented"


def test_custom_reward_file_with_function_name(ws):
    """`file.py:func` and `package.module:func` are accepted, as the reward loader supports them."""
    (ws / "reward.py").write_text("def f(response, label):\n    return 1.0\n")
    cfg = load(ws, {"rl_config": {"custom_reward_file": "reward.py:f"}})
    assert cfg.rl_config.custom_reward_file.endswith("reward.py:f")
    cfg = load(ws, {"rl_config": {"custom_reward_file": "mypkg.rewards:f"}})
    assert cfg.rl_config.custom_reward_file == "mypkg.rewards:f"
    assert_error(error(ws, {"rl_config": {"custom_reward_file": "missing.py:f"}}), "rl_config.custom_reward_file")


# ---------------------------------------------------------------------------------------------
# keys the run would not act on are refused, naming the key; combinations that cannot work too

@pytest.mark.parametrize("extra, key, fragments", [
    ({"rl_config": {"adv_estimator": "gae"}}, "rl_config.adv_estimator", ["needs a critic", "critic_config"]),
    ({"rl_config": {"use_kl_in_reward": True}}, "rl_config.kl_coef", ["is 0", "use_kl_in_reward is true"]),
    ({"rl_config": {"use_kl_in_loss": False}}, "rl_config.kl_coef", ["use_kl_in_loss: false puts the KL into the reward"]),
    ({"rl_config": {"use_kl_in_reward": True, "use_kl_in_loss": True, "kl_coef": 0.1}},
     "rl_config.use_kl_in_reward", ["both true", "applied twice"]),
    ({"rl_config": {"use_kl_in_reward": False, "use_kl_in_loss": False, "kl_coef": 0.1}},
     "rl_config.kl_coef", ["would go nowhere"]),
    ({"rl_config": {"kl_ctrl_type": "adaptive", "kl_coef": 0.1}}, "rl_config.kl_ctrl_type",
     ["needs rl_config.use_kl_in_reward: true"]),
    ({"rl_config": {"kl_target": 6.0}}, "rl_config.kl_target", ["has no effect", "adaptive"]),
    ({"rl_config": {"kl_horizon": 100}}, "rl_config.kl_horizon", ["has no effect", "adaptive"]),
    ({"rl_config": {"kl_penalty": "k1"}}, "rl_config.kl_penalty", ["has no effect", "kl_coef is 0"]),
    ({"rl_config": {"gamma": 0.99}}, "rl_config.gamma",
     ["has no effect", "'grpo' does not use it", "gae, reinforce_plus_plus"]),
    ({"rl_config": {"adv_estimator": "rloo", "lam": 0.9}}, "rl_config.lam", ["'rloo' does not use it", "gae"]),
    ({"rl_config": {"advantage_whiten": False}}, "rl_config.advantage_whiten", ["has no effect"]),
    ({"rl_config": {"adv_estimator": "rloo", "norm_adv_by_std": False}}, "rl_config.norm_adv_by_std",
     ["only grpo scales advantages"]),
    ({"rl_config": {"adv_estimator": "reinforce_plus_plus", "dynamic_sampling": True}},
     "rl_config.dynamic_sampling", ["needs groups"]),
    ({"rl_config": {"max_num_gen_batches": 2}}, "rl_config.max_num_gen_batches", ["dynamic sampling is off"]),
    ({"rl_config": {"overlong_penalty_factor": 2.0}}, "rl_config.overlong_penalty_factor",
     ["overlong penalty is off"]),
    ({"rl_config": {"policy_loss": "gspo", "clip_ratio_c": 3.0}}, "rl_config.clip_ratio_c", ["no dual clip"]),
    ({"rl_config": {"policy_loss": "gspo", "loss_agg_mode": "token-mean"}}, "rl_config.loss_agg_mode",
     ["needs seq-mean-token-mean"]),
    ({"rl_config": {"clip_ratio": 0.3, "clip_ratio_low": 0.2, "clip_ratio_high": 0.28}}, "rl_config.clip_ratio",
     ["both given"]),
    ({"actor_config": {"keep_last": 5}}, "actor_config.keep_last", ["nothing is saved"]),
    ({"actor_config": {"min_lr": 1e-8}}, "actor_config.min_lr", ["lr_decay_style is constant"]),
    ({"actor_config": {"no_load_optim": False}}, "actor_config.no_load_optim", ["finetune: true starts a new run"]),
    ({"ref": {"ref_model_load_path": "hf"}}, "ref.ref_model_load_path", ["no reference model without a KL term"]),
    ({"eval": {"interval": 5}}, "eval.interval", ["no evaluation without eval.path"]),
    ({"eval": {"n_samples": 4, "temperature": 1.0}}, "eval.n_samples", ["no evaluation without eval.path"]),
    ({"eval": {"path": "heldout.jsonl", "n_samples": 4}}, "eval.n_samples", ["need eval.temperature > 0"]),
    ({"eval": {"path": "heldout.jsonl", "top_p": 0.9}}, "eval.top_p", ["greedy evaluation"]),
    ({"runtime": {"compile_cache_path": "cc"}}, "runtime.compile_cache_path", ["enable_compile_cache is false"]),
    ({"runtime": {"strategy_dir": "st"}}, "runtime.strategy_dir", ["only_save_strategy"]),
])
def test_ignored_or_impossible_settings_are_refused(ws, extra, key, fragments):
    assert_error(error(ws, extra), key, *fragments)


def test_explicit_switch_keeps_its_dependent_keys(ws):
    """A DAPO yaml run with dynamic sampling switched off keeps its max_num_gen_batches: the user said so."""
    cfg = load(ws, {"rl_config": {"max_num_gen_batches": 2}}, overrides=["rl_config.dynamic_sampling=false"])
    assert cfg.rl_config.max_num_gen_batches == 2 and not cfg.rl_config.dynamic_sampling
    cfg = load(ws, {"rl_config": {"kl_coef": 0.0, "kl_penalty": "kl", "lam": 0.95}})  # MindSpeed-RL PPO yaml habits
    assert cfg.rl_config.kl_penalty == "kl"


def test_kl_placement_resolution(ws):
    cfg = load(ws, {"rl_config": {"kl_coef": 0.05}})
    assert cfg.rl_config.use_kl_in_loss and not cfg.rl_config.use_kl_in_reward
    cfg = load(ws, {"rl_config": {"kl_coef": 0.05, "use_kl_in_reward": True, "kl_ctrl_type": "adaptive",
                                  "kl_target": 2.0, "kl_horizon": 50}})
    assert cfg.rl_config.use_kl_in_reward and cfg.rl_config.use_kl_in_loss is False
    cfg = load(ws, {"rl_config": {"kl_coef": 0.05, "use_kl_in_loss": False}})  # the older spelling
    assert cfg.rl_config.use_kl_in_reward and cfg.rl_config.use_kl_in_loss is False


def test_gspo_gets_its_own_clip_range_and_aggregation(ws):
    cfg = load(ws, {"rl_config": {"policy_loss": "gspo"}})
    assert (cfg.rl_config.clip_ratio_low, cfg.rl_config.clip_ratio_high) == (3e-4, 4e-4)
    assert cfg.rl_config.loss_agg_mode == "seq-mean-token-mean"
    cfg = load(ws, {"rl_config": {"policy_loss": "gspo", "clip_ratio_high": 5e-4}})
    assert (cfg.rl_config.clip_ratio_low, cfg.rl_config.clip_ratio_high) == (3e-4, 5e-4)


@pytest.mark.parametrize("alias, canonical", [("group_norm", "grpo"), ("reinforce", "reinforce_plus_plus"),
                                              ("reinforce_baseline", "reinforce_plus_plus_baseline")])
def test_estimator_names_of_other_frameworks(ws, alias, canonical):
    assert load(ws, {"rl_config": {"adv_estimator": alias}}).rl_config.adv_estimator == canonical


def test_schema_takes_its_algorithm_names_from_the_registries():
    from mindrl.algorithms import ADVANTAGE_ESTIMATORS, KL_ESTIMATOR_ALIASES
    from mindrl.config import schema
    # every registered estimator and every KL alias is a choice of its key; the schema lists none of its own
    assert set(schema.ADV_ESTIMATORS) == set(ADVANTAGE_ESTIMATORS) and "gae" in schema.ADV_ESTIMATORS
    assert {"k1", "k3", "low_var_kl"} <= set(schema.KL_PENALTIES)
    assert set(schema.KL_PENALTIES) == set(KL_ESTIMATOR_ALIASES) | {a for al in KL_ESTIMATOR_ALIASES.values() for a in al}


def test_rule_reward_says_whether_rule_verifiers_score(ws):
    assert "rl_config.rule_reward: true, but rl_config.verifier_function names no verifier" in error(
        ws, {"rl_config": {"rule_reward": True, "verifier_function": [], "verifier_weight": []},
             "reward_config": {"load": "tok", "model": "model_configs/tiny.yaml"}})
    assert "rl_config.rule_reward: false, but rl_config.verifier_function names acc" in error(
        ws, {"rl_config": {"rule_reward": False, "verifier_function": ["acc"]},
             "reward_config": {"load": "tok", "model": "model_configs/tiny.yaml"}})
    cfg = load(ws, {"rl_config": {"rule_reward": False}, "reward_config": {"load": "tok",
                                                                         "model": "model_configs/tiny.yaml"}})
    assert cfg.rl_config.verifier_function == []



# -- shipped dataset configs --------------------------------------------------------------------------------------

def test_gsm8k_config_as_shipped_reads_a_qwen_tokenizer_of_only_vocab_and_merges(tmp_path):
    """configs/datasets/gsm8k.yaml's `tokenizer_type: HuggingFaceTokenizer` covers a Qwen directory without
    tokenizer.json (vocab.json + merges.txt only): prompts tokenize as transformers' Qwen2 tokenizer of the same files
    (with its chat template) does, and nothing in the config needs changing."""
    import shutil
    transformers = pytest.importorskip("transformers")
    from test_preprocess import _hf_qwen_dir, read_back, write_jsonl
    from mindrl.data.preprocess import cli_main
    full = _hf_qwen_dir(tmp_path / "full")
    only = tmp_path / "only"
    only.mkdir()
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(os.path.join(full, name), only / name)
    rows = [{"question": "x^2 + 3x = 10, find x.", "answer": "x = 2\n#### 2"},
            {"question": "You are a helpful assistant. Find x.", "answer": "so\n#### -5"}]
    config = Path(__file__).resolve().parents[1] / "configs" / "datasets" / "gsm8k.yaml"
    assert yaml.safe_load(config.read_text())["tokenizer_type"] == "HuggingFaceTokenizer"
    assert cli_main(["--config", str(config), f"input={write_jsonl(tmp_path / 'train.jsonl', rows)}",
                     f"tokenizer_name_or_path={only}", f"output_prefix={tmp_path / 'data'}"]) == 0
    ref = transformers.AutoTokenizer.from_pretrained(full)
    back = read_back(tmp_path / "data.mindrecord")
    for row, got in zip(rows, back):
        want = ref.apply_chat_template([{"role": "user", "content": row["question"]}], add_generation_prompt=True,
                                       tokenize=True)
        want = want["input_ids"] if hasattr(want, "keys") else want
        assert got["prompt_ids"].tolist() == list(want)
    assert [str(r["labels"]) for r in back] == ["2", "-5"]


def test_a_mistyped_command_or_key_gets_the_right_suggestion():
    """Issue 23 item 8: `mindrl trian` got no "did you mean", and `rl_config.lr=` suggested rl_config.lam, not the
    key of that name in another section."""
    res = subprocess.run([sys.executable, "-m", "mindrl.cli", "trian"], cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 2 and res.stderr.splitlines() == [
        "mindrl: unknown command 'trian'; did you mean 'train'? (mindrl --help says what each does)"]
    with pytest.raises(ConfigError) as err:
        load_train_config(REPO / "examples" / "grpo" / "tiny_math.yaml", ["rl_config.lr=1e-5"], check_paths=False)
    assert str(err.value).endswith("rl_config.lr: unknown key in command-line override 'rl_config.lr=1e-5'; did "
                                   "you mean 'actor_config.lr'?")
