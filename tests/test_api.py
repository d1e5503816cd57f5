"""The Python API: `from mindrl import GRPOTrainer, load_config`, reward functions as Python callables, and the
runnable example."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
CONFIG = os.path.join(ROOT, "examples", "grpo", "tiny_math.yaml")


def test_importing_mindrl_stays_cheap():
    res = subprocess.run([sys.executable, "-c", "import sys, mindrl; from mindrl import load_config, GRPOTrainer; "
                                                "print('mindspore' in sys.modules)"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 0 and res.stdout.strip() == "False", res.stderr  # msrun's scheduler imports it too


def answer_length(response, label):
    return len(response.strip()) / 10.0


def test_load_config_adds_the_reward_functions_the_config_does_not_name(tmp_path):
    from mindrl import load_config
    from mindrl.config import ConfigError
    # the demo's dataset is made by run_demo.sh, not shipped: the config checks only that its files exist
    for name in ("prompts", "heldout"):
        for suffix in (".mindrecord", ".mindrecord.db"):
            (tmp_path / f"{name}{suffix}").write_bytes(b"")
    data = [f"data.path={tmp_path / 'prompts.mindrecord'}", f"eval.path={tmp_path / 'heldout.mindrecord'}"]
    named = load_config(CONFIG, data, reward_funcs=[answer_length])  # the yaml names last_number
    assert named.rl_config.verifier_function == ["last_number", "answer_length"]
    assert named.rl_config.verifier_weight == [1.0, 1.0]
    only = load_config(CONFIG, data + ["rl_config.verifier_function=[]", "rl_config.verifier_weight=[]"],
                       reward_funcs=[answer_length])
    assert only.rl_config.verifier_function == ["answer_length"]
    weighted = load_config(CONFIG, data + ["rl_config.verifier_function=[answer_length]",
                                           "rl_config.verifier_weight=[0.5]"], reward_funcs=[answer_length])
    assert weighted.rl_config.verifier_weight == [0.5]
    with pytest.raises(ValueError, match="has no name"):
        load_config(CONFIG, data, reward_funcs=[lambda r, l: 0.0])
    with pytest.raises(ConfigError, match="rl_config.kl_coeff"):
        load_config({"rl_config": {"kl_coeff": 0.1}})


def test_grpo_trainer_adds_its_reward_functions_to_a_loaded_config(tmp_path, monkeypatch):
    """GRPOTrainer(load_config(path), reward_funcs=[fn]), the form TRL users write, gives the trainer the config
    load_config(path, reward_funcs=[fn]) gives; so do the path and dict forms. (The trainer is not built here: the
    config it would be built from is captured.)"""
    from mindrl import GRPOTrainer, load_config
    from mindrl.trainer.loop import RLTrainer
    built = []
    monkeypatch.setattr(RLTrainer, "__init__", lambda self, cfg, reward_funcs=None: built.append((cfg, reward_funcs)))
    for name in ("prompts", "heldout"):
        for suffix in (".mindrecord", ".mindrecord.db"):
            (tmp_path / f"{name}{suffix}").write_bytes(b"")
    data = [f"data.path={tmp_path / 'prompts.mindrecord'}", f"eval.path={tmp_path / 'heldout.mindrecord'}"]
    cases = [([], ["last_number", "answer_length"], [1.0, 1.0]),  # the yaml names last_number
             (["rl_config.verifier_weight=[0.5]"], ["last_number", "answer_length"], [0.5, 1.0]),
             (["rl_config.verifier_function=null", "rl_config.verifier_weight=null"], ["answer_length"], [1.0])]
    for over, verifiers, weights in cases:
        loaded = load_config(CONFIG, data + over)
        assert "answer_length" not in loaded.rl_config.verifier_function
        GRPOTrainer(loaded, reward_funcs=[answer_length])
        cfg, funcs = built[-1]
        assert (cfg.rl_config.verifier_function, cfg.rl_config.verifier_weight) == (verifiers, weights), over
        assert funcs == [answer_length]
        assert cfg == load_config(CONFIG, data + over, reward_funcs=[answer_length])
        assert cfg.to_yaml() == load_config(CONFIG, data + over, reward_funcs=[answer_length]).to_yaml()
    GRPOTrainer(CONFIG, reward_funcs=[answer_length], overrides=data)
    assert built[-1][0].rl_config.verifier_function == ["last_number", "answer_length"]
    sections = yaml.safe_load(open(CONFIG))
    sections["data"]["path"], sections["eval"]["path"] = data[0].split("=")[1], data[1].split("=")[1]
    GRPOTrainer(sections, reward_funcs=[answer_length])
    assert built[-1][0].rl_config.verifier_function == ["last_number", "answer_length"]
    named = load_config(CONFIG, data, reward_funcs=[answer_length])
    GRPOTrainer(named, reward_funcs=[answer_length])
    assert built[-1][0] is named  # already named: used as it is
    with pytest.raises(ValueError, match="a loaded config already has them"):
        GRPOTrainer(named, overrides=["rl_config.train_iters=2"])
    with pytest.raises(ValueError, match="has no name"):
        GRPOTrainer(load_config(CONFIG, data), reward_funcs=[lambda r, l: 0.0])


def test_grpo_trainer_trains_with_a_python_reward_function(tmp_path):
    """A reward function given as a Python callable scores every response (its mean is the logged metric, and the
    score the advantages are computed from), and fit() makes the same run directory `mindrl train` does."""
    from conftest import as_overrides, make_grpo_workdir, tiny_run_settings
    from mindrl import GRPOTrainer
    d = make_grpo_workdir(tmp_path)
    settings = tiny_run_settings(d, tmp_path / "runs" / "<run_id>", **{
        "rl_config.train_iters": 2, "rl_config.verifier_function": "[]", "rl_config.verifier_weight": "[]",
        "rl_config.custom_reward_file": "null"})
    trainer = GRPOTrainer(CONFIG, reward_funcs=[answer_length], overrides=as_overrides(settings))
    seen = {}
    make = trainer.maker.make

    def capture(timers):
        exp, metrics = make(timers)
        seen["exp"] = exp
        return exp, metrics
    trainer.maker.make = capture
    summary = trainer.fit()
    exp, last = seen["exp"], summary["last"]
    texts = [trainer.run.tokenizer.decode(r, skip_special_tokens=True) for r in exp.responses()]
    want = np.array([answer_length(t, "") for t in texts], np.float32)
    np.testing.assert_allclose(exp.score, want, rtol=1e-6)
    assert last["grpo/rewards/answer_length/mean"] == pytest.approx(float(want.mean()), rel=1e-5)
    run_dir = trainer.cfg.logging.log_dir
    assert os.path.dirname(run_dir) == str(tmp_path / "runs") and os.path.isfile(os.path.join(run_dir, "report.png"))
    rows = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    assert [r["step"] for r in rows] == [1, 2]


@pytest.mark.slow
def test_the_python_api_example_runs(tmp_path):
    """examples/python_api/grpo_tiny_math.py as a user runs it (on the demo's data, made here)."""
    sys.path.insert(0, os.path.join(ROOT, "examples", "tiny"))
    import task
    from mindrl.data.preprocess import cli_main
    task.write_jsonl(str(tmp_path / "train.jsonl"), task.training_ids(512, seed=2))
    assert cli_main(["--config", os.path.join(ROOT, "configs", "datasets", "tiny_math.yaml"),
                     f"input={tmp_path / 'train.jsonl'}", f"output_prefix={tmp_path / 'prompts'}"]) == 0
    res = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "python_api", "grpo_tiny_math.py"),
                          "rl_config.train_iters=2", f"data.path={tmp_path / 'prompts.mindrecord'}", "eval.path=null",
                          f"logging.log_dir={tmp_path / 'run'}"],
                         cwd=ROOT, env=dict(os.environ, GLOG_v="3"), capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "grpo/rewards/exact_answer/mean" in res.stdout and f"run directory: {tmp_path / 'run'}" in res.stdout
