"""The shipped training yamls: every one loads and validates (the real-model recipes against a stand-in tree of the
files they name), and the Qwen2.5-0.5B GSM8K recipe runs a step on a random-init model of exactly its shape."""
import glob
import os
import shutil
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
TOKENIZER = os.path.join(ROOT, "examples", "tiny", "tokenizer")
TRAINING_YAMLS = sorted(glob.glob(os.path.join(ROOT, "examples", "grpo", "*.yaml"))
                        + glob.glob(os.path.join(ROOT, "examples", "ppo", "*.yaml")))
RECIPES = [p for p in TRAINING_YAMLS if os.path.basename(p).startswith("qwen")]


def test_the_recipes_are_shipped():
    names = {os.path.basename(p) for p in RECIPES}
    assert {"qwen25_0_5b_gsm8k.yaml", "qwen25_7b_deepscaler.yaml", "qwen25_7b_math17k.yaml"} <= names
    assert any(n.startswith("qwen25") for n in (os.path.basename(p) for p in glob.glob(
        os.path.join(ROOT, "examples", "ppo", "*.yaml"))))


@pytest.mark.parametrize("path", TRAINING_YAMLS, ids=os.path.basename)
def test_every_training_yaml_validates(path):
    """Keys, values and cross-key rules (the files they name are checked by the next test for the recipes and by
    the runs of the tiny examples elsewhere)."""
    from mindrl.config import load_train_config
    cfg = load_train_config(path, check_paths=False)
    assert cfg.logging.log_dir.endswith("/<run_id>") and cfg.logging.name
    if cfg.actor_config.save:
        assert cfg.actor_config.save.startswith("<run_dir>/"), "checkpoints belong inside the run directory"


def stand_in_tree(tmp_path, cfg_path):
    """The directory a user runs a recipe from: the model directories it names (config.json from the model yaml,
    a tokenizer), the reward model if any, and the datasets (empty MindRecord pairs: only their presence is read)."""
    import yaml
    from mindrl.models.config import load_model_config
    from mindrl.trainer.roles.critic import value_model_hf_config
    raw = yaml.safe_load(open(cfg_path))
    model = load_model_config(os.path.join(ROOT, "model_configs", raw["actor_config"]["model"] + ".yaml"))
    for key in ("tokenizer_name_or_path", "load"):
        d = tmp_path / raw["actor_config"][key]
        d.mkdir(parents=True, exist_ok=True)
        for f in os.listdir(TOKENIZER):
            shutil.copy(os.path.join(TOKENIZER, f), d / f)
        (d / "config.json").write_text(__import__("json").dumps(model.to_hf_dict()))
    rm = (raw.get("reward_config") or {}).get("load")
    if rm:
        d = tmp_path / rm
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(__import__("json").dumps(value_model_hf_config(model, 0)))
    for section, key in (("data", "path"), ("eval", "path")):
        path = (raw.get(section) or {}).get(key)
        if path:
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / path).write_bytes(b"")
            (tmp_path / (path + ".db")).write_bytes(b"")


@pytest.mark.parametrize("path", RECIPES, ids=os.path.basename)
def test_recipes_validate_against_the_files_they_name(path, tmp_path, monkeypatch):
    from mindrl.config import load_train_config
    stand_in_tree(tmp_path, path)
    monkeypatch.chdir(tmp_path)
    cfg = load_train_config(path)
    world = 8 if "7b" in os.path.basename(path) else 1
    rl, gen = cfg.rl_config, cfg.generate_config
    for tp in (cfg.actor_config.tensor_model_parallel_size, gen.infer_tensor_parallel_size):
        assert world % tp == 0 and rl.global_batch_size % (world // tp) == 0
    from mindrl.config.plan import plan_run
    plan_run(cfg, world)  # every layout splits its batches
    from mindrl.models.config import load_model_config
    model = load_model_config(cfg.actor_config.model)
    assert gen.max_prompt_length + gen.max_tokens <= model.max_position_embeddings


def test_the_dataset_configs_the_recipes_name_exist():
    text = "".join(open(p).read() for p in RECIPES)
    for name in ("gsm8k_qwen25", "deepscaler", "math_17k"):
        assert f"configs/datasets/{name}.yaml" in text, name
        assert os.path.isfile(os.path.join(ROOT, "configs", "datasets", f"{name}.yaml"))


@pytest.mark.slow
def test_qwen25_0_5b_recipe_runs_a_step_at_its_exact_shape(tmp_path):
    """The GSM8K recipe's model, optimizer, KL and reward settings on a random-init Qwen2.5-0.5B (vocab 151936, tied
    head, 24 layers): one GRPO step, with the lengths and batch cut to what a test can afford. It runs in a process
    of its own, so the peak memory it reports is the step's and the suite's other tests do not add to it."""
    import json
    import subprocess
    code = (f"import sys; sys.path[:0] = [{os.path.join(ROOT, 'tests')!r}]; import test_recipes; "
            f"test_recipes.one_recipe_step({str(tmp_path)!r})")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=1500,
                         env=dict(os.environ, GLOG_v="3"))
    assert res.returncode == 0, res.stderr[-3000:]
    m = json.loads([line for line in res.stdout.splitlines() if line.startswith("METRICS ")][-1][8:])
    assert m["train/skipped_updates"] == 0 and m["actor/grad_norm"] > 0 and m["response_length/mean"] > 0
    print(f"peak resident memory {m['memory/peak_rss_gb']:.1f} GB")
    assert m["memory/peak_rss_gb"] < 18  # 15.9-16.3 GB measured (weights, gradients, AdamW, the reference)


def one_recipe_step(tmp):
    import json
    from pathlib import Path
    tmp_path = Path(tmp)
    sys.path.insert(0, os.path.join(ROOT, "examples", "tiny"))
    import task
    from mindrl.config import load_train_config
    from mindrl.data.preprocess import cli_main
    from mindrl.trainer import RLTrainer
    task.write_jsonl(str(tmp_path / "train.jsonl"), task.training_ids(32, seed=5))

    assert cli_main(["--config", os.path.join(ROOT, "configs", "datasets", "tiny_math.yaml"),
                     f"input={tmp_path / 'train.jsonl'}", f"output_prefix={tmp_path / 'train'}",
                     f"tokenizer_name_or_path={TOKENIZER}"]) == 0
    cfg = load_train_config(os.path.join(ROOT, "examples", "grpo", "qwen25_0_5b_gsm8k.yaml"), [
        "actor_config.load=null", f"actor_config.tokenizer_name_or_path={TOKENIZER}", "actor_config.save=null",
        "actor_config.save_interval=0", "actor_config.keep_last=2", "actor_config.save_best=null",
        f"data.path={tmp_path / 'train.mindrecord'}", "eval.path=null", "eval.interval=0", "eval.num_samples=null",
        "rl_config.train_iters=1", "rl_config.global_batch_size=2", "rl_config.n_samples_per_prompt=2",
        "rl_config.mini_batch_size=2", "rl_config.micro_batch_size=2", "rl_config.verifier_function=[last_number]",
        # a random-init model's tokens lie beyond the test tokenizer's 192 (no text, equal rewards, zero advantages):
        # the entropy bonus gives the update a gradient through every layer all the same
        "rl_config.entropy_coeff=0.01",
        "generate_config.max_prompt_length=16", "generate_config.max_tokens=8",
        f"logging.log_dir={tmp_path / 'run'}", "logging.progress_bar=false"])
    t = RLTrainer(cfg)
    assert t.run.model_config.vocab_size == 151936 and t.run.model_config.tie_word_embeddings
    params = sum(int(p.size) for p in t.policy.net.trainable_params())
    assert 490e6 < params < 500e6, params
    assert t.reference is not None  # kl_coef 0.001: the KL in the loss runs too
    before = t.policy.net.model.norm.weight.asnumpy().copy()
    m = t.train_step()
    assert not np.array_equal(before, t.policy.net.model.norm.weight.asnumpy())
    print("METRICS " + json.dumps({k: float(v) for k, v in m.items()}), flush=True)
