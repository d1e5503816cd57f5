"""The README's main job: GRPO on the shipped tiny policy raises held-out greedy accuracy (fixed seed)."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "tiny"))


@pytest.mark.slow
def test_demo_grpo_raises_heldout_accuracy(tmp_path):
    import task
    from mindrl.config import load_train_config
    from mindrl.data.preprocess import cli_main
    from mindrl.trainer import RLTrainer
    task.write_jsonl(str(tmp_path / "train.jsonl"), task.training_ids(20000, seed=2))
    task.write_jsonl(str(tmp_path / "heldout.jsonl"), task.heldout_ids())
    ds_cfg = os.path.join(ROOT, "configs", "datasets", "tiny_math.yaml")
    tok = os.path.join(ROOT, "examples", "tiny", "tokenizer")
    for name, prefix in (("train", "prompts"), ("heldout", "heldout")):
        assert cli_main(["--config", ds_cfg, f"input={tmp_path / name}.jsonl", f"output_prefix={tmp_path / prefix}",
                         f"tokenizer_name_or_path={tok}"]) == 0
    cfg = load_train_config(os.path.join(ROOT, "examples", "grpo", "tiny_math.yaml"), [
        f"data.path={tmp_path / 'prompts.mindrecord'}", f"eval.path={tmp_path / 'heldout.mindrecord'}",
        f"actor_config.save={tmp_path / 'ckpt'}", f"logging.log_dir={tmp_path / 'logs'}",
        "logging.progress_bar=false"])
    os.chdir(ROOT)
    summary = RLTrainer(cfg).fit()
    before = summary["eval_before"]["eval/last_number/mean"]
    after = summary["eval_after"]["eval/last_number/mean"]
    print(f"held-out accuracy {before:.3f} -> {after:.3f}")
    assert before == pytest.approx(0.48, abs=0.03)  # the shipped warm-up checkpoint
    assert after >= before + 0.05


@pytest.mark.slow
def test_demo_reward_model_then_ppo_scored_by_it(tmp_path):
    """The README's PPO example: `mindrl train-rm` on preference pairs from the task learns to rank them on held-out
    pairs; PPO scored by that reward model alone (the rule only measures held-out accuracy) runs its 20 steps and
    the critic learns to predict the returns. Held-out accuracy is printed, not asserted: on this machine PPO does
    not raise it (48.0% -> 42.9%, README), because the reward model is blind to the units digit."""
    import task
    from mindrl.config import load_train_config
    from mindrl.data.preprocess import cli_main
    from mindrl.trainer import RLTrainer
    from mindrl.trainer.reward_training import cli_main as train_rm
    task.write_jsonl(str(tmp_path / "train.jsonl"), task.training_ids(20000, seed=2))
    task.write_jsonl(str(tmp_path / "heldout.jsonl"), task.heldout_ids())
    task.write_pairs_jsonl(str(tmp_path / "pairs.jsonl"), task.training_ids(20000, 102), 2)
    task.write_pairs_jsonl(str(tmp_path / "pairs_heldout.jsonl"), task.heldout_ids(), 3)
    tok = os.path.join(ROOT, "examples", "tiny", "tokenizer")
    datasets = os.path.join(ROOT, "configs", "datasets")
    for cfg_name, name in (("tiny_math", "train"), ("tiny_math", "heldout"), ("tiny_math_pairs", "pairs"),
                           ("tiny_math_pairs", "pairs_heldout")):
        assert cli_main(["--config", os.path.join(datasets, f"{cfg_name}.yaml"), f"input={tmp_path / name}.jsonl",
                         f"output_prefix={tmp_path / name}", f"tokenizer_name_or_path={tok}"]) == 0
    os.chdir(ROOT)
    assert train_rm(["--config", os.path.join(ROOT, "examples", "rm", "tiny_math.yaml"),
                     f"data.path={tmp_path / 'pairs.mindrecord'}", f"eval.path={tmp_path / 'pairs_heldout.mindrecord'}",
                     f"rm_config.save={tmp_path / 'rm'}", f"logging.log_dir={tmp_path / 'rm_logs'}",
                     "logging.progress_bar=false"]) == 0
    import json
    rm_rows = [json.loads(line) for line in open(tmp_path / "rm_logs" / "metrics.jsonl")]
    held_out = [r for r in rm_rows if "rm/num_pairs" in r]
    assert held_out[0]["rm/accuracy"] < 0.1 and held_out[-1]["rm/accuracy"] > 0.7  # a zero head ties every pair
    assert held_out[-1]["rm/margin_mean"] > 1.0
    cfg = load_train_config(os.path.join(ROOT, "examples", "ppo", "tiny_math_rm.yaml"), [
        f"reward_config.load={tmp_path / 'rm'}", f"data.path={tmp_path / 'train.mindrecord'}",
        f"eval.path={tmp_path / 'heldout.mindrecord'}", f"actor_config.save={tmp_path / 'ckpt'}",
        f"logging.log_dir={tmp_path / 'logs'}", "logging.progress_bar=false"])
    summary = RLTrainer(cfg).fit()
    before = summary["eval_before"]["eval/last_number/mean"]
    after = summary["eval_after"]["eval/last_number/mean"]
    print(f"held-out accuracy {before:.3f} -> {after:.3f}")
    assert before == pytest.approx(0.48, abs=0.03)
    assert 0.0 < after < 1.0
    rows = [json.loads(line) for line in open(tmp_path / "logs" / "metrics.jsonl") if "timing/all" in line]
    ev = [r["critic/vf_explained_var"] for r in rows]
    assert sum(ev[-5:]) / 5 > max(0.3, sum(ev[:5]) / 5 + 0.05)  # the critic learns to predict the returns
