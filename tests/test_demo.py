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
    """The README's PPO example, the shipped pipeline: `mindrl train-rm` (examples/rm/tiny_math.yaml) on synthetic
    pairs (the right answer against a `wrong_answer` mistake), measured on held-out pairs of the policy's own
    sampled answers (examples/tiny/sample_pairs.py); then PPO (examples/ppo/tiny_math_rm.yaml) scored by that
    reward model alone (the rule only measures held-out accuracy) raises held-out greedy accuracy, and the critic
    learns to predict the returns.

    Measured here (Nov 2026, 2 CPU cores): the reward model ranks 0.679 of the 1071 held-out pairs correctly
    (0.000 before training; margin 1.11); PPO takes held-out accuracy 0.480 -> 0.586 at the shipped seed (1234),
    and critic/vf_explained_var goes 0.00 -> 0.47 over the 10 steps. On 28 Nov, first in a fresh test process, the
    reward model ranked 0.813 (margin 1.81, held-out reward std 5.68), PPO went 0.480 -> 0.584, and the critic,
    predicting returns of that wider spread, reached 0.08-0.13 in the last three steps: the bound below asks that it
    learns (it starts at 0), not how fast. Over seeds 1234 and 1-5 the rise was -0.1 to
    +10.6 points (mean +6.0), so the bounds below hold at the shipped seed, not at every seed. A reward model
    trained 4 epochs instead of 10 (0.548) fails the accuracy bound, and PPO scored by it fell on 3 of those 6
    seeds. This test took 338 s here (train-rm about 4.5 min of it).
    """
    import json
    import sample_pairs
    import task
    from mindrl.config import load_train_config
    from mindrl.data.preprocess import cli_main
    from mindrl.data.tokenizer import load_tokenizer
    from mindrl.models import from_pretrained
    from mindrl.trainer import RLTrainer
    from mindrl.trainer.reward_training import cli_main as train_rm
    tiny = os.path.join(ROOT, "examples", "tiny")
    task.write_jsonl(str(tmp_path / "train.jsonl"), task.training_ids(20000, seed=2))
    task.write_jsonl(str(tmp_path / "heldout.jsonl"), task.heldout_ids())
    task.write_pairs_jsonl(str(tmp_path / "pairs.jsonl"), task.training_ids(20000, 102), 2)  # task.py --pairs
    counts = sample_pairs.write_policy_pairs(  # sample_pairs.py's defaults: 4 answers per problem, seed 3
        str(tmp_path / "pairs_heldout.jsonl"), from_pretrained(os.path.join(tiny, "policy")),
        load_tokenizer(os.path.join(tiny, "tokenizer")), task.heldout_ids(), 4, 3)
    assert counts["pairs"] > 500, counts
    tok = os.path.join(tiny, "tokenizer")
    datasets = os.path.join(ROOT, "configs", "datasets")
    for cfg_name, name in (("tiny_math", "train"), ("tiny_math", "heldout"), ("tiny_math_pairs", "pairs"),
                           ("tiny_math_pairs", "pairs_heldout")):
        assert cli_main(["--config", os.path.join(datasets, f"{cfg_name}.yaml"), f"input={tmp_path / name}.jsonl",
                         f"output_prefix={tmp_path / name}", f"tokenizer_name_or_path={tok}"]) == 0
    os.chdir(ROOT)
    assert train_rm(["--config", os.path.join(ROOT, "examples", "rm", "tiny_math.yaml"),
                     f"data.path={tmp_path / 'pairs.mindrecord'}", f"eval.path={tmp_path / 'pairs_heldout.mindrecord'}",
                     f"logging.log_dir={tmp_path / 'rm_logs'}",
                     "logging.progress_bar=false"]) == 0
    rm_rows = [json.loads(line) for line in open(tmp_path / "rm_logs" / "metrics.jsonl")]
    held_out = [r for r in rm_rows if "rm/num_pairs" in r]
    print(f"reward model held-out accuracy {held_out[0]['rm/accuracy']:.3f} -> {held_out[-1]['rm/accuracy']:.3f}")
    assert held_out[0]["rm/accuracy"] < 0.1  # a zero head ties every pair, and a tie counts as wrong
    assert held_out[-1]["rm/accuracy"] > 0.6  # 0.679 measured (4 epochs instead of 10: 0.548)
    assert held_out[-1]["rm/margin_mean"] > 0.5  # 1.11 measured
    cfg = load_train_config(os.path.join(ROOT, "examples", "ppo", "tiny_math_rm.yaml"), [
        f"reward_config.load={tmp_path / 'rm_logs' / 'model'}", f"data.path={tmp_path / 'train.mindrecord'}",
        f"eval.path={tmp_path / 'heldout.mindrecord'}", f"actor_config.save={tmp_path / 'ckpt'}",
        f"logging.log_dir={tmp_path / 'logs'}", "logging.progress_bar=false"])
    summary = RLTrainer(cfg).fit()
    before = summary["eval_before"]["eval/last_number/mean"]
    after = summary["eval_after"]["eval/last_number/mean"]
    rows = [json.loads(line) for line in open(tmp_path / "logs" / "metrics.jsonl") if "timing/all" in line]
    ev = [r["critic/vf_explained_var"] for r in rows]
    print(f"held-out accuracy {before:.3f} -> {after:.3f}; critic/vf_explained_var {[round(v, 2) for v in ev]}")
    assert before == pytest.approx(0.48, abs=0.03)  # the shipped warm-up checkpoint
    assert after >= before + 0.02  # no label in the training reward: the reward model taught it
    assert ev[0] < 0.05 and sum(ev[-3:]) / 3 > 0.05  # values start at 0 (zero head), then explain the returns
