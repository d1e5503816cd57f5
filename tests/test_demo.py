"""The README's demos learn (fixed seeds): GRPO and PPO on the shipped tiny policy raise held-out greedy accuracy,
and `mindrl train-rm` learns to rank pairs it never saw.

The README's longer pipeline, a reward model trained for 10 epochs and then PPO scored by it alone, takes about
6 minutes on a quiet 2-core machine and three times that beside the rest of the suite; its figures in the README
were measured by running its commands. CI runs that pipeline's commands shortened (tests/test_docs.py), checks that
the reward model learns here, and that PPO scored by a reward model equals its single-process run under msrun
(tests/test_parallel.py)."""
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "examples", "tiny")
DATASETS = os.path.join(ROOT, "configs", "datasets")
sys.path.insert(0, TINY)


def preprocess(jsonl, prefix, dataset_config="tiny_math"):
    from mindrl.data.preprocess import cli_main
    assert cli_main(["--config", os.path.join(DATASETS, f"{dataset_config}.yaml"), f"input={jsonl}",
                     f"output_prefix={prefix}", f"tokenizer_name_or_path={os.path.join(TINY, 'tokenizer')}"]) == 0
    return f"{prefix}.mindrecord"


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    """The demo's training prompts and its 1000 held-out problems, as scripts/run_demo.sh makes them."""
    import task
    d = tmp_path_factory.mktemp("demo_data")
    task.write_jsonl(str(d / "train.jsonl"), task.training_ids(20000, seed=2))
    task.write_jsonl(str(d / "heldout.jsonl"), task.heldout_ids())
    return preprocess(d / "train.jsonl", d / "prompts"), preprocess(d / "heldout.jsonl", d / "heldout")


def fit(example, prompts, tmp_path, *extra):
    from mindrl.config import load_train_config
    from mindrl.trainer import RLTrainer
    train, heldout = prompts
    cfg = load_train_config(os.path.join(ROOT, "examples", example), [
        f"data.path={train}", f"eval.path={heldout}", f"actor_config.save={tmp_path / 'ckpt'}",
        f"logging.log_dir={tmp_path / 'logs'}", "logging.progress_bar=false", *extra])
    os.chdir(ROOT)
    summary = RLTrainer(cfg).fit()
    before = summary["eval_before"]["eval/last_number/mean"]
    after = summary["eval_after"]["eval/last_number/mean"]
    print(f"held-out accuracy {before:.3f} -> {after:.3f}")
    return before, after


@pytest.mark.slow
def test_demo_grpo_raises_heldout_accuracy(prompts, tmp_path):
    """`bash scripts/run_demo.sh`'s run for its first 20 steps, where it evaluates (a constant learning rate, so
    they are the 60-step run's): measured 0.480 -> 0.617 at step 20 (28 Nov; 0.591 at step 60)."""
    before, after = fit("grpo/tiny_math.yaml", prompts, tmp_path, "rl_config.train_iters=20")
    assert before == pytest.approx(0.48, abs=0.03)  # the shipped warm-up checkpoint
    assert after >= before + 0.05


@pytest.mark.slow
def test_demo_ppo_raises_heldout_accuracy(prompts, tmp_path):
    """examples/ppo/tiny_math.yaml (rule reward, critic, GAE) for its first 20 steps, where it evaluates: measured
    0.480 -> 0.608 (28 Nov, as the README's 60-step run prints at step 20), in about a minute on 2 quiet cores."""
    before, after = fit("ppo/tiny_math.yaml", prompts, tmp_path, "rl_config.train_iters=20")
    rows = [json.loads(line) for line in open(tmp_path / "logs" / "metrics.jsonl") if "timing/all" in line]
    assert len(rows) == 20
    assert before == pytest.approx(0.48, abs=0.03)
    assert after >= before + 0.08
    ev = [r["critic/vf_explained_var"] for r in rows]
    assert ev[0] < 0.05 and max(ev[-5:]) > 0.05  # the critic starts at 0 (zero head), then explains the returns


@pytest.mark.slow
def test_demo_reward_model_learns_to_rank_pairs_it_never_saw(tmp_path):
    """`mindrl train-rm --config examples/rm/tiny_math.yaml` on half of the README's training pairs (task.py --pairs,
    its first 10,000) for 2 epochs (312 steps, the cosine schedule over those), judged on synthetic pairs of the
    1000 held-out problems: measured 0.618 of them ranked right, mean margin 0.61 (0 before: a zero head ties every
    pair, and a tie counts as wrong). The run is sensitive to float rounding: with MindSpore's AdamWeightDecay kernel
    in place of the Adam kernel (28 Nov; the first steps' losses equal to 6 digits) it gave 0.689 and 1.65, and all
    20,000 pairs for 2 epochs gave 0.834, for 1 epoch 0.649. About 40 s on 2 quiet cores."""
    import task
    from mindrl.trainer.reward_training import cli_main as train_rm
    task.write_pairs_jsonl(str(tmp_path / "pairs.jsonl"), task.training_ids(10000, 102), 2)  # task.py --pairs
    task.write_pairs_jsonl(str(tmp_path / "pairs_heldout.jsonl"), task.heldout_ids(), 7)
    train = preprocess(tmp_path / "pairs.jsonl", tmp_path / "pairs", "tiny_math_pairs")
    heldout = preprocess(tmp_path / "pairs_heldout.jsonl", tmp_path / "pairs_heldout", "tiny_math_pairs")
    os.chdir(ROOT)
    assert train_rm(["--config", os.path.join(ROOT, "examples", "rm", "tiny_math.yaml"), "train.train_iters=312",
                     f"data.path={train}", f"eval.path={heldout}", f"logging.log_dir={tmp_path / 'rm_logs'}",
                     "logging.progress_bar=false"]) == 0
    held_out = [r for r in map(json.loads, open(tmp_path / "rm_logs" / "metrics.jsonl")) if "rm/num_pairs" in r]
    print(f"reward model held-out accuracy {held_out[0]['rm/accuracy']:.3f} -> {held_out[-1]['rm/accuracy']:.3f}")
    assert held_out[0]["rm/accuracy"] < 0.1 and held_out[-1]["rm/num_pairs"] == 1000
    assert held_out[-1]["rm/accuracy"] > 0.6
    assert held_out[-1]["rm/margin_mean"] > 0.4  # 0.61 measured (1.65 with the AdamWeightDecay kernel)
    assert os.path.isdir(tmp_path / "rm_logs" / "model")  # what PPO's reward_config.load reads
