"""The MindRLHF Qwen-PPO tutorial's command, as written, on the tiny model: rlhf_data.py makes the MindRecord,
`mindrl train-rm` a reward model, then msrun runs ppo_one_stage.py with every flag of the tutorial."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
pytestmark = [pytest.mark.slow, pytest.mark.msrun]
TUTORIAL = os.path.join(ROOT, "examples", "qwen_ppo_tutorial")


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
    res = run([sys.executable, "-m", "mindrl.cli", "train-rm", "--config",
               os.path.join(ROOT, "examples", "rm", "tiny_math.yaml"), f"data.path={d / 'pairs.mindrecord'}",
               "eval.path=null", "train.epochs=1", f"rm_config.save={d / 'rm'}",
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
            "--load_rm_checkpoint", str(d / "rm"), "--load_critic_checkpoint", str(d / "rm"),
            "--load_ref_checkpoint", policy, "--enable_compile_cache", "False",
            "--only_save_strategy", only_save_strategy]


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
    assert rows[0]["timing/reward_model"] > 0 and rows[0]["timing/critic_model"] > 0


def test_tutorial_only_save_strategy_writes_every_role(work, tmp_path):
    res = run(tutorial_command(work, "True"), tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    written = sorted(p.name for p in (tmp_path / "strategy").iterdir())
    for stage in ("infer_policy", "train_policy", "train_critic", "train_ref", "infer_reward"):
        assert any(stage in name for name in written), (stage, written)
    assert not (tmp_path / "ckpt").exists()  # it exits before training
