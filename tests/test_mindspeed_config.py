"""MindSpeed-RL's training yamls read with MindSpeed-RL's meaning (mindrl/config/mindspeed_rl.py).

The files in tests/peer_configs/mindspeed_rl/ keep every key of MindSpeed-RL's published configs; only paths and
sizes differ. The batch arithmetic is checked against MindSpeed-RL's own formulas, written out here from its code
(rl_config.py multiplies mini_batch_size by n_samples_per_prompt; actor_hybrid_worker.py splits each data-parallel
rank's share into mini-batches of mini*n/dp; base_training_engine.py runs `epochs` passes of them, each in
micro-batches of micro_batch_size), independently of mindrl's plan code.
"""
import math
import os
import shutil

import pytest
import yaml

from mindrl.config import ConfigError, load_train_config
from mindrl.config.mindspeed_rl import GENERATE, MEGATRON, RL, SAMPLING
from mindrl.config.plan import plan_run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER = os.path.join(ROOT, "tests", "peer_configs", "mindspeed_rl")
FILES = ("grpo_qwen25_7b_A3.yaml", "ppo_qwen25_7b_A2.yaml", "dapo_qwen25_32b_A3.yaml", "grpo_qwen3_8b_A3.yaml")


def peer(name):
    with open(os.path.join(PEER, name), encoding="utf-8") as fh:
        return yaml.safe_load(fh)


@pytest.fixture
def layout(tmp_path, monkeypatch):
    """MindSpeed-RL's layout in a scratch directory: configs/ with configs/model/ beside the training yamls."""
    shutil.copytree(PEER, tmp_path / "configs")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "Qwen3-8B").mkdir()  # grpo_qwen3_8b_A3's weights: a converted model, loaded as a release
    (tmp_path / "Qwen3-8B" / "config.json").write_text("{}")
    return tmp_path


def load(name, overrides=(), data=None, layout_dir=None):
    """A peer file (or ``data`` written under that name) loaded without file checks."""
    path = os.path.join("configs", name)
    if data is not None:
        with open(path, "w", encoding="utf-8") as fh:
            yaml.safe_dump(data, fh)
    return load_train_config(path, list(overrides), check_paths=False)


def error(name, overrides=(), data=None) -> str:
    with pytest.raises(ConfigError) as info:
        load(name, overrides, data)
    return str(info.value)


# -- MindSpeed-RL's batch arithmetic, from its code ---------------------------------------------------------------

def mindspeed_counts(gbs, n, mini, mbs, epochs, dp):
    """(optimizer updates per step, micro-batches per update per rank) as MindSpeed-RL's workers compute them."""
    mini_internal = mini * n                       # RLConfig: mini_batch_size * n_samples_per_prompt
    mini_per_dp = mini_internal // dp              # actor engine: rl_config.mini_batch_size // dp
    share = gbs * n // dp                          # actor_update_dispatch_size default: gbs*n // dp
    minibatches = math.ceil(share / mini_per_dp)   # torch.split(share, mini_per_dp)
    micro = math.ceil(min(mini_per_dp, share) / mbs)  # torch.split(mini-batch, micro_batch_size)
    return epochs * minibatches, micro


CASES = [  # (file, global_batch_size, n, mini_batch_size, micro_batch_size, epochs, tp, world)
    ("grpo_qwen25_7b_A3.yaml", 32, 8, 32, 1, 1, 4, 16),   # as published
    ("grpo_qwen25_7b_A3.yaml", 32, 8, 8, 2, 1, 4, 16),
    ("grpo_qwen25_7b_A3.yaml", 32, 8, 16, 4, 2, 2, 8),
    ("grpo_qwen25_7b_A3.yaml", 4, 8, 256, 2, 1, 4, 8),    # grpo_qwen25_7b_A2: mini larger than the batch
    ("ppo_qwen25_7b_A2.yaml", 256, 1, 256, 1, 1, 4, 8),   # as published
    ("ppo_qwen25_7b_A2.yaml", 256, 1, 64, 2, 1, 2, 4),
    ("grpo_qwen3_8b_A3.yaml", 32, 8, 32, 1, 1, 2, 16),
    ("grpo_qwen3_8b_A3.yaml", 16, 4, 4, 2, 1, 1, 2),
]


@pytest.mark.parametrize("name, gbs, n, mini, mbs, epochs, tp, world", CASES)
def test_updates_and_micro_batches_equal_mindspeed_rl(layout, name, gbs, n, mini, mbs, epochs, tp, world):
    cfg = load(name, [f"megatron_training.global_batch_size={gbs}", f"rl_config.n_samples_per_prompt={n}",
                      f"rl_config.mini_batch_size={mini}", f"actor_config.micro_batch_size={mbs}",
                      f"rl_config.epochs={epochs}", f"actor_config.tensor_model_parallel_size={tp}",
                      f"rl_config.actor_resource={{num_npus: {world}}}",
                      f"generate_config.infer_tensor_parallel_size={tp}"]
               + ([f"critic_config.tensor_model_parallel_size={tp}", f"critic_config.micro_batch_size={mbs}",
                   f"rl_config.critic_resource={{num_npus: {world}}}"] if name.startswith("ppo") else []))
    b = plan_run(cfg, world).batch
    updates, micro = mindspeed_counts(gbs, n, mini, mbs, epochs, world // tp)
    assert (b.prompts, b.responses) == (gbs, gbs * n)
    assert (b.updates, b.micro_batches_per_update) == (updates, micro)
    if name.startswith("ppo"):
        assert (b.updates, b.critic_micro_batches_per_update) == (updates, micro)
    # MindSpeed-RL skips the old-log-prob pass exactly when gbs*n == mini*n and epochs == 1
    assert b.recompute_old_log_probs == (not (gbs <= mini and epochs == 1))


def test_dapo_trains_on_the_filtered_batch_and_generates_in_global_batches(layout):
    """filter_groups_train_batch_size is the training batch; global_batch_size the generation batch per pass."""
    cfg = load("dapo_qwen25_32b_A3.yaml", ["megatron_training.global_batch_size=32", "rl_config.mini_batch_size=8",
                                           "rl_config.filter_groups_train_batch_size=16",
                                           "rl_config.n_samples_per_prompt=8"])
    rl = cfg.rl_config
    assert (rl.global_batch_size, rl.gen_batch_size, rl.mini_batch_size) == (16, 32, 8)
    b = plan_run(cfg, 1).batch
    assert (b.prompts, b.gen_prompts, b.updates) == (16, 32, mindspeed_counts(16, 8, 8, 1, 1, 1)[0])
    assert rl.dynamic_sampling and rl.dynamic_sampling_metric == "acc_for_dapo"  # grpo/acc_for_dapo_rewards/mean
    assert rl.max_num_gen_batches == 2  # the test file's; MindSpeed-RL's -1 is mindrl's 0, no limit
    assert load("dapo_qwen25_32b_A3.yaml", ["rl_config.filter_groups_max_batches=-1"]).rl_config.max_num_gen_batches \
        == 0
    assert load("dapo_qwen25_32b_A3.yaml", ["rl_config.filter_groups_metric=acc_for_dapo"]) \
        .rl_config.dynamic_sampling_metric == "acc_for_dapo"  # MindSpeed-RL's newer spelling: the verifier name


def test_dapo_keys_mean_what_mindspeed_rl_does(layout):
    rl = load("dapo_qwen25_32b_A3.yaml").rl_config
    assert (rl.clip_ratio_low, rl.clip_ratio_high) == (0.2, 0.28)                    # clip_higher_enable
    assert (rl.overlong_buffer_len, rl.overlong_penalty_factor) == (4, 1.0)          # overlong_buffer_enable
    assert rl.loss_agg_mode == "token-mean-per-micro-batch"                          # token_level_loss: true
    assert rl.kl_coef == 0.0                                                          # DAPO has no KL term
    assert load("dapo_qwen25_32b_A3.yaml", ["rl_config.token_level_loss=false"]).rl_config.loss_agg_mode == \
        "seq-mean-token-mean"
    off = load("dapo_qwen25_32b_A3.yaml", ["rl_config.clip_higher_enable=false", "rl_config.clip_ratio_low=null",
                                           "rl_config.clip_ratio_high=null"]).rl_config
    assert (off.clip_ratio_low, off.clip_ratio_high) == (0.2, 0.2)  # clip_ratio both ways
    msg = error("dapo_qwen25_32b_A3.yaml", ["rl_config.clip_higher_enable=false"])
    assert "rl_config.clip_ratio_low: MindSpeed-RL reads it only with clip_higher_enable: true" in msg
    msg = error("dapo_qwen25_32b_A3.yaml", ["rl_config.rollout_max_tokens=16"])
    assert "rl_config.rollout_max_tokens: 16 differs from sampling_config.max_tokens 8" in msg \
        or "rollout_max_tokens" in msg
    msg = error("dapo_qwen25_32b_A3.yaml", ["rl_config.init_kl_coef=0.01"])
    assert "rl_config.init_kl_coef: MindSpeed-RL's DAPO has no reference model and no KL term" in msg


def test_stage_decides_where_the_kl_goes(layout):
    grpo = load("grpo_qwen25_7b_A3.yaml").rl_config
    assert (grpo.kl_coef, grpo.use_kl_in_loss, grpo.use_kl_in_reward) == (0.001, True, False)
    assert grpo.loss_agg_mode == "token-mean-per-micro-batch"
    ppo = load("ppo_qwen25_7b_A2.yaml")
    assert ppo.rl_config.kl_coef == 0.0 and ppo.critic_config.loss_agg_mode == "token-mean-per-micro-batch"
    kl = load("ppo_qwen25_7b_A2.yaml", ["rl_config.init_kl_coef=0.05", "rl_config.use_kl_in_reward=true"]).rl_config
    assert (kl.kl_coef, kl.use_kl_in_reward, kl.use_kl_in_loss) == (0.05, True, False)
    msg = error("ppo_qwen25_7b_A2.yaml", ["rl_config.init_kl_coef=0.05"])
    assert "MindSpeed-RL's PPO applies it only in the reward, with use_kl_in_reward: true" in msg
    msg = error("grpo_qwen25_7b_A3.yaml", ["rl_config.use_kl_in_reward=true"])
    assert "MindSpeed-RL's GRPO puts the KL into the loss" in msg


def test_absent_keys_get_mindspeed_rl_defaults_not_mindrl_ones(layout):
    data = peer("grpo_qwen25_7b_A3.yaml")
    for key in ("n_samples_per_prompt", "mini_batch_size", "init_kl_coef", "shuffle_minibatch", "verifier_function",
                "verifier_weight", "entropy_coeff", "use_tensorboard"):
        data["rl_config"].pop(key)
    for key in ("adam_beta2", "weight_decay", "lr_decay_style"):
        data["actor_config"].pop(key)
    data["generate_config"].pop("sampling_config")
    cfg = load("grpo.yaml", data=data, overrides=["rl_config.n_samples_per_prompt=2"])
    rl, actor, gen = cfg.rl_config, cfg.actor_config, cfg.generate_config
    assert (rl.mini_batch_size, rl.kl_coef, rl.shuffle_minibatch, rl.verifier_function) == (1, 0.01, False,
                                                                                            ["base_acc"])
    assert (actor.adam_beta2, actor.weight_decay, actor.lr_decay_style) == (0.999, 0.01, "linear")
    assert (gen.temperature, gen.top_k, gen.max_tokens) == (0.2, 50, 128)  # MindSpeed-RL's sampling_config default
    assert cfg.logging.tensorboard is False
    # a sampling_config without max_tokens gets vLLM's default, as MindSpeed-RL hands the mapping to vLLM
    data = peer("grpo_qwen25_7b_A3.yaml")
    data["generate_config"]["sampling_config"].pop("max_tokens")
    assert load("grpo.yaml", data=data).generate_config.max_tokens == 16


def test_finetune_false_on_weights_is_megatrons_release_load(layout):
    """grpo_qwen3_8b_A3 says finetune: false with a converted model: Megatron loads it as a release (step 0)."""
    cfg = load("grpo_qwen3_8b_A3.yaml")
    assert cfg.actor_config.finetune is True
    assert "release" in cfg.meta.origins["actor_config.finetune"]


def test_model_files_are_found_beside_the_config_then_among_mindrls(layout):
    cfg = load("grpo_qwen25_7b_A3.yaml")
    assert cfg.actor_config.model == str(layout / "configs" / "model" / "qwen25_7b.yaml")
    (layout / "configs" / "model" / "qwen25_7b.yaml").unlink()
    shipped = load("grpo_qwen25_7b_A3.yaml").actor_config.model
    assert shipped == os.path.join(ROOT, "configs", "model", "qwen25_7b.yaml")
    data = peer("grpo_qwen25_7b_A3.yaml")
    data["defaults"] = [{"model": ["no_such_model"]}]
    data["megatron_training"]["model"] = data["actor_config"]["model"] = "no_such_model"
    assert "model 'no_such_model': no " in error("grpo.yaml", data=data)


def test_a_model_key_restated_elsewhere_must_agree_with_the_model_file(layout):
    ok = load("grpo_qwen25_7b_A3.yaml", ["megatron_training.norm_epsilon=1e-6"])
    assert ok.actor_config.model.endswith("qwen25_7b.yaml")
    msg = error("grpo_qwen25_7b_A3.yaml", ["megatron_training.norm_epsilon=1e-5"])
    assert "megatron_training.norm_epsilon: 1e-05 differs from" in msg and "change it there" in msg


def test_a_model_files_training_arguments_are_the_runs_or_refused(layout, monkeypatch):
    """configs/model/qwen25_32b.yaml carries adam_beta2: a MindSpeed-RL file reads it as the run's; the model reader
    skips exactly the table's training keys; a mindrl config naming that file is refused (it would ignore them)."""
    from mindrl.models.config import _MEGATRON_KEYS, _MEGATRON_NO_EFFECT, MEGATRON_TRAINING_KEYS, load_model_config
    assert MEGATRON_TRAINING_KEYS == set(MEGATRON) - set(_MEGATRON_KEYS) - set(_MEGATRON_NO_EFFECT)
    model_file = layout / "configs" / "model" / "qwen25_32b.yaml"
    model = yaml.safe_load(model_file.read_text())
    args = next(iter(model.values()))
    args["adam_beta2"] = 0.9
    model_file.write_text(yaml.safe_dump(model))
    data = peer("dapo_qwen25_32b_A3.yaml")
    del data["actor_config"]["adam_beta2"]
    cfg = load("dapo.yaml", data=data)
    assert cfg.actor_config.model == str(model_file) and cfg.actor_config.adam_beta2 == 0.9
    assert load_model_config(str(model_file)).num_layers == args["num_layers"]
    monkeypatch.chdir(ROOT)
    with pytest.raises(ConfigError) as info:
        load_train_config("examples/grpo/tiny_math.yaml", [f"actor_config.model={model_file}"])
    assert f"actor_config.model: {model_file} carries Megatron training arguments (adam_beta1, adam_beta2, " in str(info.value)


def test_world_size_is_checked_against_the_devices_the_file_asks_for(layout):
    cfg = load("grpo_qwen25_7b_A3.yaml", ["rl_config.actor_resource={num_npus: 16}",
                                          "actor_config.tensor_model_parallel_size=4",
                                          "generate_config.infer_tensor_parallel_size=4"])
    assert cfg.runtime.world_size == 16
    with pytest.raises(ConfigError) as info:
        plan_run(cfg, 2)
    assert "written for 16 processes" in str(info.value) and "rl_config.actor_resource.num_npus" in str(info.value)


def test_refusals_name_the_key_and_the_reason_all_at_once(layout):
    msg = error("grpo_qwen25_7b_A3.yaml", ["actor_config.pipeline_model_parallel_size=2", "actor_config.no_save_optim=true",
                                           "rl_config.shuffle_mini_batch=true", "rl_config.use_dynamic_bsz=true",
                                           "generate_config.sampling_config.min_p=0.1"])
    lines = msg.splitlines()
    assert len(lines) == 5, msg
    for key in ("actor_config.pipeline_model_parallel_size", "actor_config.no_save_optim",
                "rl_config.shuffle_mini_batch", "rl_config.use_dynamic_bsz", "generate_config.sampling_config.min_p"):
        assert any(f": {key}: " in line and ("because" in line or "MindSpeed-RL" in line) for line in lines), key
    assert "unknown key" not in msg and "did you mean" not in msg


@pytest.mark.parametrize("table, section", [(MEGATRON, "actor_config"), (RL, "rl_config"),
                                            (GENERATE, "generate_config"),
                                            (SAMPLING, "generate_config.sampling_config")])
def test_every_key_of_the_tables_is_read_accepted_or_refused_with_its_reason(layout, table, section):
    """Each rule acts as it says: a key that sets a mindrl key sets it, a no-effect key is a note in the plan, a
    value-restricted key accepts its values and refuses another with the reason."""
    base = "grpo_qwen25_7b_A3.yaml"
    checked = {"seq_length": 100000, "max_model_len": 100000, "tokenizer_name_or_path": "./Qwen2.5-7B",
               "dtype": "bfloat16", "trust_remote_code": "false"}  # values the run's checks accept
    for key, rule in table.items():
        if rule.to or key in ("rollout_max_tokens",):
            continue  # read keys: the tests above and the one-step runs check their meaning
        over = f"{section}.{key}"
        if rule.any:
            cfg = load(base, [f"{over}={checked.get(key, 7)}"])
            assert any(n.startswith(f"{over}: ") for n in cfg.meta.notes), key
        elif rule.ok:
            for value in rule.ok:
                text = "null" if value is None else yaml.safe_dump(value).splitlines()[0]
                cfg = load(base, [f"{over}={text}"])
                assert any(n.startswith(f"{over}: ") for n in cfg.meta.notes), (key, value)
            msg = error(base, [f"{over}=[9]"])
            assert f"{over}: [9] is not used by mindrl because {rule.why}" in msg, msg
        else:
            assert f"{over}: not used by mindrl because {rule.why}" in error(base, [f"{over}=1"])


def test_mindspeed_keys_in_a_mindrl_file_keep_their_meaning_without_its_defaults(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = {"actor_config": {"model": "m.yaml", "tokenizer_name_or_path": "tok", "micro_batch_size": 4,
                             "pipeline_model_parallel_size": 1},
            "rl_config": {"init_kl_coef": 0.02, "epochs": 2, "global_batch_size": 8, "mini_batch_size": 4,
                          "integrated_mode_config": {"ref_model_load_path": "ref"}},
            "generate_config": {"sampling_config": {"top_k": -1, "temperature": 0.7}, "max_num_seqs": 16},
            "data": {"path": "d.mindrecord"}}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(data))
    cfg = load_train_config("cfg.yaml", check_paths=False)
    rl, gen = cfg.rl_config, cfg.generate_config
    assert (rl.kl_coef, rl.ppo_epochs, rl.micro_batch_size, cfg.ref.ref_model_load_path) == (0.02, 2, 4, "ref")
    assert (gen.top_k, gen.temperature, gen.max_num_seqs, gen.max_tokens) == (0, 0.7, 16, 256)  # mindrl default
    assert rl.n_samples_per_prompt == 8 and rl.loss_agg_mode == "token-mean"  # mindrl's defaults, not MindSpeed-RL's
    data["rl_config"]["token_level_loss"] = True
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as info:
        load_train_config("cfg.yaml", check_paths=False)
    assert "in a mindrl file use rl_config.loss_agg_mode" in str(info.value)


def test_an_override_of_a_peer_spelling_beats_the_files_mindrl_spelling(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = {"actor_config": {"model": "m.yaml", "tokenizer_name_or_path": "tok"}, "data": {"path": "d.mindrecord"},
            "rl_config": {"kl_coef": 0.2}}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(data))
    cfg = load_train_config("cfg.yaml", ["rl_config.init_kl_coef=0.3"], check_paths=False)
    assert cfg.rl_config.kl_coef == 0.3 and "command line" in cfg.meta.origins["rl_config.kl_coef"]


def test_the_plan_says_where_numbers_came_from(layout):
    cfg = load("dapo_qwen25_32b_A3.yaml")
    text = plan_run(cfg, 1).text()
    assert "read as MindSpeed-RL's" in text and "per step: 4 prompts x 4 samples = 16 responses" in text
    assert "rl_config.global_batch_size: configs/dapo_qwen25_32b_A3.yaml: rl_config.filter_groups_train_batch_size" \
        in text
    assert "generation: batches of 4 prompts, at most 2 per step" in text
    assert "generate_config.offload_train_param=true" in text  # accepted without effect, and said so


def test_every_mindspeed_key_is_documented():
    doc = open(os.path.join(ROOT, "docs", "configuration.md"), encoding="utf-8").read()
    for section, table in (("megatron_training / actor_config / critic_config", MEGATRON), ("rl_config", RL),
                           ("generate_config", GENERATE), ("generate_config.sampling_config", SAMPLING)):
        for key in table:
            assert f"`{key}`" in doc, f"{section}.{key} is not in docs/configuration.md"


# -- the files run: a step each, in MindSpeed-RL's layout (slow) --------------------------------------------------

@pytest.fixture(scope="module")
def peer_dir(tmp_path_factory):
    """MindSpeed-RL's layout with tiny weights and raw data (tests/peer_workdir.py), its dataset yamls run by
    `mindrl preprocess` as they are."""
    from peer_workdir import make_peer_workdir
    d = make_peer_workdir(tmp_path_factory.mktemp("mindspeed_rl"))
    for name in ("deepscaler", "math_17k", "r1_zero_qwen25_7b"):
        res = mindrl(d, "preprocess", "--config", f"configs/datasets/{name}.yaml")
        assert res.returncode == 0, (name, res.stderr[-2000:])
    return d


def mindrl(cwd, *args, timeout=900):
    import subprocess
    import sys
    env = dict(os.environ, GLOG_v="3")
    return subprocess.run([sys.executable, "-m", "mindrl.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow
def test_mindspeed_rl_dataset_yamls_write_their_rows(peer_dir):
    """deepscaler.yaml (problem/answer), math_17k.yaml (chat-message prompts, the answer inside reward_model) and
    r1_zero's JSON-text map_keys: every row written, with the reference answer as its label."""
    import json
    from mindspore.mindrecord import FileReader
    from peer_workdir import PROBLEMS
    answers = [a for _, a in PROBLEMS] * 4
    for out in ("dataset/deepscaler/data.mindrecord", "dataset/math_17k/data.mindrecord", "dataset/orz.mindrecord"):
        reader = FileReader(os.path.join(peer_dir, out))
        labels = [row["labels"] for row in reader.get_next()]
        reader.close()
        assert labels == answers, out
    rows = json.load(open(os.path.join(peer_dir, "dataset", "deepscaler.json")))
    assert len(rows) == len(answers)


@pytest.mark.slow
@pytest.mark.parametrize("name", FILES)
def test_each_published_training_yaml_runs_a_step(peer_dir, name):
    """MindSpeed-RL's GRPO, PPO, DAPO and Qwen3 GRPO yamls, every key kept, only paths and sizes changed: a step
    runs, and the start-up plan says what MindSpeed-RL would do with them."""
    res = mindrl(peer_dir, "train", "--config", f"configs/{name}")
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    assert out.splitlines()[0].startswith("run directory: ")
    updates = 2 if name.startswith("ppo") else 1  # the PPO file: 8 of 16 prompts per update
    assert "read as MindSpeed-RL's" in out and f"actor: {updates} optimizer update" in out
    assert "step 1 " in out
    if name.startswith("dapo"):
        assert "generation: batches of 4 prompts, at most 2 per step" in out
    if name.startswith("ppo"):
        assert "critic: 2 optimizer updates per step" in out


def test_mindspeed_llm_lora_keys_mean_what_they_mean_there(layout):
    """MindSpeed-LLM's LoRA arguments in a MindSpeed-RL file: lora_target_modules turns LoRA on, with its defaults
    r=16 and alpha=32 when the file leaves them out; linear_proj/linear_fc2 are o_proj/down_proj; the fused
    linear_qkv is refused (its one adapter shares A across q, k and v, which separate adapters are not)."""
    from mindrl.config.plan import lora_spec
    data = peer("grpo_qwen25_7b_A3.yaml")
    data["actor_config"].update({"lora_r": 8, "lora_alpha": 16, "lora_target_modules": ["linear_proj", "linear_fc2"]})
    actor = load("grpo.yaml", data=data).actor_config
    assert (actor.lora_rank, actor.lora_alpha) == (8, 16.0)
    assert lora_spec(actor, 0).targets == ("o_proj", "down_proj")
    for key in ("lora_r", "lora_alpha"):
        data["actor_config"].pop(key)
    actor = load("grpo.yaml", data=data).actor_config
    assert (actor.lora_rank, actor.lora_alpha) == (16, 32.0)  # MindSpeed-LLM's defaults
    data["actor_config"]["lora_target_modules"] = ["linear_qkv"]
    with pytest.raises(ConfigError) as info:
        load("grpo.yaml", data=data)
    assert "actor_config.lora_target_modules" in str(info.value) and "shares its A" in str(info.value)
    assert load("grpo.yaml", data=peer("grpo_qwen25_7b_A3.yaml")).actor_config.lora_rank == 0  # no LoRA keys
