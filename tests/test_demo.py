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
