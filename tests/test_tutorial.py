"""The MindRLHF Qwen-PPO tutorial's command, as written, on the tiny model: rlhf_data.py makes the MindRecord,
`mindrl train-rm` a reward model, then msrun runs ppo_one_stage.py with every flag of the tutorial (slow); and the
script's flag handling, flags to mindrl overrides, without training (fast)."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
TUTORIAL = os.path.join(ROOT, "examples", "qwen_ppo_tutorial")
SCRIPT = os.path.join(TUTORIAL, "ppo_one_stage.py")
POLICY = os.path.join(ROOT, "examples", "tiny", "policy")  # an HF directory of the tiny model
GENERATE_YAML = os.path.join(ROOT, "model_configs", "qwen_ppo", "generate_tiny.yaml")  # tp 2, seq 64, decode 6
FINETUNE_YAML = os.path.join(ROOT, "model_configs", "qwen_ppo", "finetune_tiny.yaml")  # dp 2, tp 1
slow = pytest.mark.slow
msrun = pytest.mark.msrun


def load_script():
    spec = importlib.util.spec_from_file_location("ppo_one_stage", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines the functions; training runs only under __main__
    return module


ppo_one_stage = load_script()


def run(cmd, cwd, timeout=900):
    env = dict(os.environ, GLOG_v="3", PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """Pairs from the tiny task, the tutorial's MindRecord (rlhf_data.py, chosen responses) and a reward model."""
    d = tmp_path_factory.mktemp("tutorial")
    sys.path.insert(0, os.path.join(ROOT, "examples", "tiny"))
    import task
    task.write_pairs_jsonl(str(d / "pairs.jsonl"), task.training_ids(512, 7), 7)
    tok = os.path.join(ROOT, "examples", "tiny", "tokenizer")
    res = run([sys.executable, os.path.join(TUTORIAL, "rlhf_data.py"), "--tokenizer_dir", tok,
               "--file_path", str(d / "pairs.jsonl"), "--response_key", "chosen", "--output_path",
               str(d / "data.mindrecord"), "--max_prompt_length", "58", "--seq_length", "64"], ROOT)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Total number of samples: 512" in res.stdout
    from mindrl.data.preprocess import cli_main
    assert cli_main(["--config", os.path.join(ROOT, "configs", "datasets", "tiny_math_pairs.yaml"),
                     f"input={d / 'pairs.jsonl'}", f"output_prefix={d / 'pairs'}"]) == 0
    # a few steps: any trained score head will do, the tutorial's PPO run is what these tests check
    res = run([sys.executable, "-m", "mindrl.cli", "train-rm", "--config",
               os.path.join(ROOT, "examples", "rm", "tiny_math.yaml"), f"data.path={d / 'pairs.mindrecord'}",
               "eval.path=null", "train.train_iters=8", "rm_config.save=null",
               f"logging.log_dir={d / 'rm_logs'}", "logging.progress_bar=false"], ROOT)
    assert res.returncode == 0, res.stderr[-2000:]
    return d


def tutorial_command(d, only_save_strategy: str):
    """The tutorial's msrun line, every flag, paths into the shipped tiny yamls and this test's files."""
    cfg = lambda name: os.path.join(ROOT, "model_configs", "qwen_ppo", name)  # noqa: E731
    policy = os.path.join(ROOT, "examples", "tiny", "policy")
    from test_parallel import free_port
    return [os.path.join(os.path.dirname(sys.executable), "msrun"), "--worker_num=2", "--local_worker_num=2",
            "--master_addr=127.0.0.1", f"--master_port={free_port()}", "--join=True", "--log_dir=./qwen2_one_log",
            os.path.join(TUTORIAL, "ppo_one_stage.py"),
            "--sft_path_infer", cfg("generate_tiny.yaml"), "--sft_path_train", cfg("finetune_tiny.yaml"),
            "--reward_path", cfg("generate_tiny.yaml"), "--critic_path", cfg("generate_tiny.yaml"),
            "--mind_dataset_dir", str(d / "data.mindrecord"), "--save_ckpt_dir", "./ckpt",
            "--use_parallel", "True", "--load_sft_checkpoint_infer", policy, "--load_sft_checkpoint_train", policy,
            "--load_rm_checkpoint", str(d / "rm_logs" / "model"),
            "--load_critic_checkpoint", str(d / "rm_logs" / "model"),
            "--load_ref_checkpoint", policy, "--enable_compile_cache", "False",
            "--only_save_strategy", only_save_strategy]


@slow
@msrun
def test_tutorial_command_trains_ppo(work, tmp_path):
    res = run(tutorial_command(work, "False") + ["rl_config.train_iters=2", "logging.log_dir=./logs"], tmp_path)
    logs = "".join(p.read_text()[-3000:] for p in sorted((tmp_path / "qwen2_one_log").glob("worker_*.log")))
    assert res.returncode == 0, logs
    ck = tmp_path / "ckpt"
    assert (ck / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    for role in ("policy", "critic"):
        assert (ck / "iter_0000002" / role / "config.json").exists(), role
    rows = [json.loads(line) for line in open(tmp_path / "logs" / "metrics.jsonl") if "timing/all" in line]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["reward_model/score/mean"] == r["reward_model/score/mean"] for r in rows)  # finite, scored
    assert rows[0]["timing/reward_model"] > 0 and rows[0]["timing/update_critic"] > 0
    assert "timing/critic_model" not in rows[0]  # one update per step: the critic's update gives the values


@slow
@msrun
def test_tutorial_only_save_strategy_writes_every_role(work, tmp_path):
    res = run(tutorial_command(work, "True"), tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    written = sorted(p.name for p in (tmp_path / "strategy").iterdir())
    for stage in ("infer_policy", "train_policy", "train_critic", "train_ref", "infer_reward"):
        assert any(stage in name for name in written), (stage, written)
    assert not (tmp_path / "ckpt").exists()  # it exits before training


# -- the script's flag handling (fast: flags to mindrl overrides, no MindSpore, no training) ---------------------------

PATH_FLAGS = ("sft_path_infer", "sft_path_train", "reward_path", "critic_path", "mind_dataset_dir", "save_ckpt_dir",
              "load_sft_checkpoint_infer", "load_sft_checkpoint_train", "load_rm_checkpoint", "load_critic_checkpoint",
              "load_ref_checkpoint")


def flags(tmp_path, **changes):
    """The tutorial's flags on the tiny model (its yamls; its HF directory for every checkpoint, which is all the
    script checks of them), with ``changes``; a value of None leaves the flag out."""
    data = tmp_path / "data.mindrecord"
    if not data.exists():  # the script checks that the MindRecord and its index exist; mindrl's preflight reads them
        data.write_bytes(b"")
        (tmp_path / "data.mindrecord.db").write_bytes(b"")
    values = {"sft_path_infer": GENERATE_YAML, "sft_path_train": FINETUNE_YAML, "reward_path": GENERATE_YAML,
              "critic_path": GENERATE_YAML, "mind_dataset_dir": str(data), "save_ckpt_dir": str(tmp_path / "ckpt"),
              "use_parallel": "True", "load_sft_checkpoint_infer": POLICY, "load_sft_checkpoint_train": POLICY,
              "load_rm_checkpoint": POLICY, "load_critic_checkpoint": POLICY, "load_ref_checkpoint": POLICY,
              "enable_compile_cache": "False", "only_save_strategy": "False"}
    values.update(changes)
    return [arg for k, v in values.items() if v is not None for arg in (f"--{k}", v)]


def config_for(tmp_path, world=2, extra=(), **changes):
    """The mindrl training config the flags make under ``world`` msrun workers, as mindrl's loader validates it."""
    from mindrl.config import load_train_config
    args = ppo_one_stage.parse(flags(tmp_path, **changes) + list(extra))
    return load_train_config(args.config, ppo_one_stage.overrides_for(args, world=world), check_paths=False)


def refusal(tmp_path, world=2, **changes) -> str:
    with pytest.raises(ppo_one_stage.UsageError) as err:
        ppo_one_stage.overrides_for(ppo_one_stage.parse(flags(tmp_path, **changes)), world=world)
    return str(err.value)


def test_yaml_sft_paths_set_the_two_layouts_and_the_lengths(tmp_path):
    cfg = config_for(tmp_path)
    assert cfg.actor_config.model == FINETUNE_YAML
    assert cfg.actor_config.tensor_model_parallel_size == 1  # finetune_tiny.yaml: dp 2 x mp 1
    assert cfg.generate_config.infer_tensor_parallel_size == 2  # generate_tiny.yaml: dp 1 x mp 2
    assert cfg.reward_config.tensor_model_parallel_size == cfg.critic_config.tensor_model_parallel_size == 2
    assert (cfg.generate_config.max_prompt_length, cfg.generate_config.max_tokens) == (64 - 6, 6)
    assert config_for(tmp_path, world=1).generate_config.infer_tensor_parallel_size == 1  # one process
    message = refusal(tmp_path, world=4)  # dp x mp = 2 in the yamls
    assert message.startswith("--sft_path_infer ") and "4 msrun workers" in message


def test_hf_directories_for_both_sft_paths_get_tp_1_and_dp_world(tmp_path):
    for world in (2, 4):
        cfg = config_for(tmp_path, world=world, sft_path_infer=POLICY, sft_path_train=POLICY, reward_path=POLICY,
                         critic_path=POLICY)
        assert cfg.actor_config.model == POLICY
        assert cfg.actor_config.tensor_model_parallel_size == 1
        assert cfg.generate_config.infer_tensor_parallel_size == 1
        assert cfg.reward_config.tensor_model_parallel_size == cfg.critic_config.tensor_model_parallel_size == 1
    # an HF config.json has no response length: the lengths are --config's, or overrides after the flags
    default = config_for(tmp_path)
    args = ppo_one_stage.parse(flags(tmp_path, sft_path_infer=POLICY, sft_path_train=POLICY))
    assert not any(o.startswith("generate_config.max_") for o in ppo_one_stage.overrides_for(args, world=2))
    cfg = config_for(tmp_path, sft_path_infer=POLICY, sft_path_train=POLICY,
                     extra=["generate_config.max_prompt_length=50", "generate_config.max_tokens=14",
                            "generate_config.infer_tensor_parallel_size=2"])
    assert (cfg.generate_config.max_prompt_length, cfg.generate_config.max_tokens) == (50, 14)
    assert cfg.generate_config.infer_tensor_parallel_size == 2  # an override after the flags wins
    assert (default.generate_config.max_prompt_length, default.generate_config.max_tokens) == (58, 6)


def test_a_yaml_and_an_hf_directory_of_the_same_model_mix(tmp_path):
    # generate_tiny.yaml says LlamaConfig with qkv_has_bias (MindFormers' way to write Qwen2); the directory says qwen2
    cfg = config_for(tmp_path, sft_path_train=POLICY)
    assert cfg.actor_config.model == POLICY and cfg.actor_config.tensor_model_parallel_size == 1
    assert cfg.generate_config.infer_tensor_parallel_size == 2
    assert (cfg.generate_config.max_prompt_length, cfg.generate_config.max_tokens) == (58, 6)
    cfg = config_for(tmp_path, sft_path_infer=POLICY, sft_path_train=GENERATE_YAML)
    assert cfg.actor_config.model == GENERATE_YAML and cfg.actor_config.tensor_model_parallel_size == 2
    assert cfg.generate_config.infer_tensor_parallel_size == 1
    assert (cfg.generate_config.max_prompt_length, cfg.generate_config.max_tokens) == (58, 6)  # the train yaml's


def test_sft_paths_of_different_models_are_refused_naming_both_flags(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    doc = json.load(open(os.path.join(POLICY, "config.json")))
    (other / "config.json").write_text(json.dumps(dict(doc, num_hidden_layers=3)))
    import yaml
    with open(GENERATE_YAML) as fh:
        wider = yaml.safe_load(fh)
    wider["model"]["model_config"]["intermediate_size"] = 256
    (tmp_path / "wider.yaml").write_text(yaml.safe_dump(wider))
    for changes, difference in (({"sft_path_infer": str(other)}, "num_layers 3 vs 2"),  # HF dir and yaml
                                ({"sft_path_infer": str(other), "sft_path_train": POLICY}, "num_layers 3 vs 2"),
                                ({"sft_path_infer": str(tmp_path / "wider.yaml")}, "intermediate_size 256 vs 512")):
        message = refusal(tmp_path, **changes)
        assert "--sft_path_infer" in message and "--sft_path_train" in message, message
        assert difference in message, message


@pytest.mark.parametrize("flag", ["use_parallel", "enable_compile_cache", "only_save_strategy"])
def test_boolean_flags_take_the_strings_true_and_false_only(tmp_path, capsys, flag):
    for text, value in (("True", True), ("False", False), ("true", True), ("false", False), ("TRUE", True),
                        ("fAlSe", False)):  # MindRLHF lower-cases them
        assert getattr(ppo_one_stage.parse(flags(tmp_path, **{flag: text})), flag) is value
    with pytest.raises(SystemExit) as stop:
        ppo_one_stage.parse(flags(tmp_path, **{flag: "yes"}))
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert f"--{flag}" in error and "'yes'" in error, error


def test_boolean_flags_reach_the_config(tmp_path):
    on = config_for(tmp_path, enable_compile_cache="True", only_save_strategy="True")
    off = config_for(tmp_path)
    assert on.runtime.enable_compile_cache is True and on.runtime.only_save_strategy is True
    assert off.runtime.enable_compile_cache is False and off.runtime.only_save_strategy is False
    assert refusal(tmp_path, use_parallel="False").startswith("--use_parallel False, but msrun started 2 workers")
    assert config_for(tmp_path, world=1, use_parallel="False").actor_config.tensor_model_parallel_size == 1


@pytest.mark.parametrize("flag", PATH_FLAGS)
def test_a_bad_path_is_named_by_its_flag(tmp_path, flag):
    bad = str(tmp_path / "missing" / "x")
    if flag == "save_ckpt_dir":  # a directory under a file can never be made
        (tmp_path / "a_file").write_text("")
        bad = str(tmp_path / "a_file" / "ckpt")
    lines = refusal(tmp_path, **{flag: bad}).splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"--{flag}: ") and bad in lines[0], lines


def test_without_a_reward_model_the_rule_reward_of_the_config_scores(tmp_path):
    """MindRLHF scores with a randomly initialised reward model when --load_rm_checkpoint is left out; mindrl scores
    with the rule reward --config names, and refuses to start without one."""
    cfg = config_for(tmp_path, extra=["rl_config.verifier_function=[last_number]"], load_rm_checkpoint=None)
    assert cfg.reward_config is None and cfg.rl_config.verifier_function == ["last_number"]
    assert refusal(tmp_path, load_rm_checkpoint=None).startswith("--load_rm_checkpoint: not given, and --config names "
                                                                 "no rule reward")


def test_the_generate_yamls_sampling_and_mindformers_keys(tmp_path):
    """MindRLHF's generate yaml samples greedily (do_sample: False); its Qwen-style keys restate what MindFormers'
    LLaMA uses (head size hidden/heads, rotary base theta, full rotary) and a value that does not is refused, as is
    an activation or an embedding dropout mindrl's decoders do not have."""
    import yaml
    cfg = config_for(tmp_path)
    assert cfg.generate_config.do_sample is False and cfg.rl_config.n_samples_per_prompt == 1
    with open(GENERATE_YAML) as fh:
        doc = yaml.safe_load(fh)
    mc = doc["model"]["model_config"]
    assert (mc["kv_channels"], mc["rotary_emb_base"], mc["rotary_pct"], mc["compute_in_2d"]) == (32, 10000, 1.0, True)
    for key, value in (("kv_channels", 64), ("rotary_emb_base", 1e6), ("rotary_pct", 0.5)):
        changed = {**doc, "model": {**doc["model"], "model_config": {**mc, key: value}}}
        (tmp_path / "g.yaml").write_text(yaml.safe_dump(changed))
        message = refusal(tmp_path, sft_path_infer=str(tmp_path / "g.yaml"))
        assert f"model.model_config.{key}: {value!r} is not what runs" in message, message
    for key, value in (("hidden_act", "gelu"), ("emb_dropout_prob", 0.1)):  # another model: refused, not dropped
        changed = {**doc, "model": {**doc["model"], "model_config": {**mc, key: value}}}
        (tmp_path / "g.yaml").write_text(yaml.safe_dump(changed))
        message = refusal(tmp_path, sft_path_infer=str(tmp_path / "g.yaml"))
        assert f"model.model_config.{key}: {value!r} is not supported" in message, message
    piped = {**doc, "parallel_config": {**doc["parallel_config"], "pipeline_stage": 2}}
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(piped))
    message = refusal(tmp_path, sft_path_infer=str(tmp_path / "g.yaml"))
    assert "parallel_config.pipeline_stage: 2 is not supported" in message, message
    sampling = {**doc, "model": {**doc["model"], "model_config": {**mc, "do_sample": True, "top_k": 5, "top_p": 0.8}}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(sampling))
    gen = config_for(tmp_path, sft_path_infer=str(tmp_path / "s.yaml")).generate_config
    assert (gen.do_sample, gen.top_k, gen.top_p) == (True, 5, 0.8)


def test_a_mindformers_checkpoint_takes_its_tokenizer_from_the_yaml(tmp_path):
    """A MindFormers .ckpt holds no tokenizer: the train yaml's processor.tokenizer vocab_file/merges_file give it."""
    import shutil
    import yaml
    ckpt = tmp_path / "qwen2.ckpt"
    ckpt.write_bytes(b"")
    vocab_dir = tmp_path / "vocab"
    vocab_dir.mkdir()
    (vocab_dir / "vocab.json").write_text("{}")
    (vocab_dir / "merges.txt").write_text("")
    with open(FINETUNE_YAML) as fh:
        doc = yaml.safe_load(fh)
    doc["processor"]["tokenizer"].update(vocab_file=str(vocab_dir / "vocab.json"),
                                         merges_file=str(vocab_dir / "merges.txt"))
    (tmp_path / "f.yaml").write_text(yaml.safe_dump(doc))
    cfg = config_for(tmp_path, sft_path_train=str(tmp_path / "f.yaml"), load_sft_checkpoint_train=str(ckpt),
                     load_sft_checkpoint_infer=None)
    assert cfg.actor_config.tokenizer_name_or_path == str(vocab_dir)
    shutil.rmtree(vocab_dir)
    message = refusal(tmp_path, sft_path_train=str(tmp_path / "f.yaml"), load_sft_checkpoint_train=str(ckpt),
                      load_sft_checkpoint_infer=None)
    assert message.startswith("--sft_path_train: ") and "must both exist" in message


def test_missing_rm_checkpoint_exits_2_naming_the_flag_before_mindspore(tmp_path):
    fake = tmp_path / "no_mindspore" / "mindspore"  # importing MindSpore fails in this subprocess
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('ppo_one_stage.py imported mindspore')\n")
    env = dict(os.environ, GLOG_v="3", PYTHONPATH=str(fake.parent))
    rm = str(tmp_path / "runs" / "rm")
    for changes, expected in (({"load_rm_checkpoint": rm}, f"--load_rm_checkpoint: checkpoint not found: {rm!r}"),
                              ({"load_rm_checkpoint": None}, "--load_rm_checkpoint: not given")):
        res = subprocess.run([sys.executable, SCRIPT] + flags(tmp_path, **changes), cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 2, res.stderr
        assert expected in res.stderr and "Traceback" not in res.stderr, res.stderr
