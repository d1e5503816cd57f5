"""GRPO trainer end to end on a random tiny policy and the demo task's data."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "tiny"))

METRICS = ["timing/all", "timing/rollout", "timing/old_log_p", "timing/reference_model", "timing/update",
           "timing/rule_reward", "timing/reshard_to_infer", "e2e_tps", "update_tps",
           "rollout_tps", "response_length/mean", "response_length/min", "response_length/max",
           "response_length/clip_ratio", "prompt_length/mean", "prompt_length/min", "prompt_length/max",
           "grpo/score/mean", "grpo/rewards/mean", "grpo/rewards/last_number/mean", "grpo/rewards/ones/mean", "actor/pg_loss", "actor/kl_loss",
           "actor/entropy", "actor/pg_clipfrac", "actor/ppo_kl", "actor/lr", "actor/grad_norm"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    from conftest import make_grpo_workdir
    return make_grpo_workdir(tmp_path_factory.mktemp("grpo"))


def make_config(workdir, run, **over):
    from conftest import tiny_run_config
    return tiny_run_config(workdir, run, {
        "rl_config.train_iters": 4, "actor_config.save": str(workdir / run / "ckpt"), "actor_config.save_interval": 2,
        "eval.path": str(workdir / "heldout.mindrecord"), "eval.interval": 0}, over)


def run(cfg):
    from mindrl.trainer import RLTrainer
    trainer = RLTrainer(cfg)
    trainer.fit()
    return trainer


def read_metrics(path):
    with open(path) as fh:
        return [json.loads(line) for line in fh]


def test_metrics_checkpoints_and_resume_trajectory(workdir):
    full = run(make_config(workdir, "full"))
    rows = [r for r in read_metrics(workdir / "full" / "logs" / "metrics.jsonl") if "timing/all" in r]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    for name in METRICS:
        assert all(np.isfinite(r[name]) for r in rows), name
    assert os.listdir(workdir / "full" / "logs" / "tensorboard")
    ck = workdir / "full" / "ckpt"
    assert sorted(os.listdir(ck)) == ["iter_0000002", "iter_0000004", "latest_checkpointed_iteration.txt"]

    # resume from step 2 in a fresh directory: steps 3 and 4 must repeat the uninterrupted run
    import shutil
    shutil.copytree(ck / "iter_0000002", workdir / "resume_src" / "iter_0000002")
    (workdir / "resume_src" / "latest_checkpointed_iteration.txt").write_text("2")
    resumed = run(make_config(workdir, "resumed", **{"actor_config.finetune": "false",
                                                     "actor_config.load": str(workdir / "resume_src")}))
    again = [r for r in read_metrics(workdir / "resumed" / "logs" / "metrics.jsonl") if "timing/all" in r]
    assert [r["step"] for r in again] == [3, 4]
    for a, b in zip(rows[2:], again):
        for key in ("grpo/score/mean", "actor/pg_loss", "actor/grad_norm", "actor/entropy", "response_length/mean"):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), key
    wa, wb = full.policy.state_dict(), resumed.policy.state_dict()
    assert all(np.allclose(wa[k], wb[k], rtol=1e-5, atol=1e-7) for k in wa)


def test_checkpoint_of_the_previous_layout_still_loads(workdir, tmp_path):
    """Before roles, a checkpoint held the policy's files at the iter_* root. Such a checkpoint still resumes
    (repeating the uninterrupted run) and still loads as weights."""
    import shutil
    from mindrl.manifest import write_manifest
    from mindrl.models import from_pretrained
    old = tmp_path / "old" / "iter_0000002"
    shutil.copytree(workdir / "full" / "ckpt" / "iter_0000002" / "policy", old)
    shutil.copy(workdir / "full" / "ckpt" / "iter_0000002" / "trainer_state.json", old)
    write_manifest(str(old), {"step": 2})
    (tmp_path / "old" / "latest_checkpointed_iteration.txt").write_text("2")
    ids = np.array([[5, 9, 143, 150, 10, 144]], np.int32)
    assert np.allclose(from_pretrained(str(tmp_path / "old")).logits(ids),
                       from_pretrained(str(workdir / "full" / "ckpt" / "iter_0000002")).logits(ids), atol=0)
    run(make_config(workdir, "from_old", **{"actor_config.finetune": "false",
                                             "actor_config.load": str(tmp_path / "old")}))
    full = [r for r in read_metrics(workdir / "full" / "logs" / "metrics.jsonl") if "timing/all" in r]
    again = [r for r in read_metrics(workdir / "from_old" / "logs" / "metrics.jsonl") if "timing/all" in r]
    assert [r["step"] for r in again] == [3, 4]
    for a, b in zip(full[2:], again):
        for key in ("grpo/score/mean", "actor/pg_loss", "actor/grad_norm"):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), key


def test_exported_policy_loads_in_transformers(workdir):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from mindrl.models import from_pretrained
    path = workdir / "full" / "ckpt" / "iter_0000004"
    ours = from_pretrained(str(path))  # a training checkpoint: its policy
    theirs = transformers.AutoModelForCausalLM.from_pretrained(str(path / "policy")).eval()
    ids = np.array([[5, 9, 143, 150, 10, 144]], np.int32)
    with torch.no_grad():
        ref = theirs(torch.tensor(ids, dtype=torch.long)).logits.numpy()
    assert np.allclose(ours.logits(ids), ref, atol=1e-4)


def test_corrupt_checkpoint_is_named(workdir, tmp_path):
    import shutil
    from mindrl.models.safetensors_io import CheckpointError
    from mindrl.trainer import checkpoint as ck
    bad = tmp_path / "iter_0000002"
    shutil.copytree(workdir / "full" / "ckpt" / "iter_0000002", bad)
    with open(bad / "policy" / "optimizer.safetensors", "r+b") as fh:
        fh.truncate(100)
    for read in (ck.verify, lambda d: ck.load_optimizer_state(d, "policy")):
        with pytest.raises(CheckpointError, match=r"policy/optimizer\.safetensors: size 100 differs from the manifest"):
            read(str(bad))
    assert ck.load_trainer_state(str(bad))["step"] == 2  # its own file is intact


def test_gradient_accumulation_matches_one_big_micro_batch(workdir):
    """micro_batch 4 x 4 accumulated == one micro-batch of 16: same update (exact denominators)."""
    from mindrl.trainer import RLTrainer
    weights = []
    for micro in (16, 4):
        cfg = make_config(workdir, f"acc{micro}", **{"rl_config.micro_batch_size": micro,
                                                     "rl_config.train_iters": 1, "actor_config.save": "null",
                                                     "actor_config.save_interval": 0, "eval.path": "null"})
        t = RLTrainer(cfg)
        t.fit()
        weights.append(t.policy.state_dict())
    a, b = weights
    from mindrl.models.weights import TensorSource
    init = TensorSource(str(workdir / "policy"))
    assert max(float(np.abs(a[k] - init.get(k)).max()) for k in a) > 1e-4  # the update did something
    assert max(float(np.abs(a[k] - b[k]).max()) for k in a) < 1e-5


def test_padding_to_a_multiple_gives_the_same_update(workdir):
    """rl_config.pad_to_multiple_of: the training graphs run at multiples of 3 instead of powers of two (other
    shapes, less padding) and the update is the same."""
    from mindrl.trainer import RLTrainer

    class Needs:  # an experience whose longest prompt and response are 11 and 5 tokens
        def widths_needed(self):
            return 11, 5
    weights = []
    for multiple, widths in ((0, (16, 8)), (3, (12, 6))):
        cfg = make_config(workdir, f"pad{multiple}", **{"rl_config.pad_to_multiple_of": multiple,
                                                        "rl_config.train_iters": 1, "actor_config.save": "null",
                                                        "actor_config.save_interval": 0, "eval.path": "null"})
        t = RLTrainer(cfg)
        assert t.run.train_widths(Needs()) == widths
        t.fit()
        weights.append(t.policy.state_dict())
    a, b = weights
    from mindrl.models.weights import TensorSource
    init = TensorSource(str(workdir / "policy"))
    assert max(float(np.abs(a[k] - init.get(k)).max()) for k in a) > 1e-4  # the update did something
    assert max(float(np.abs(a[k] - b[k]).max()) for k in a) < 1e-5


def test_training_widths_grow_with_the_longest_batch_and_never_shrink():
    """WidthsRun: a batch runs at widths compiled before whenever they hold it (the narrowest such); new widths
    hold it and every earlier batch, so a run compiles its training graphs again only when a batch is longer than
    all before it, never when its lengths vary below that."""
    from mindrl.trainer.context import WidthsRun
    widths = WidthsRun()
    needs = [(64, 32), (64, 16), (64, 32), (32, 64), (64, 16), (128, 8), (64, 64), (16, 8)]
    got = [widths.fit(*n) for n in needs]
    assert all(g[0] >= n[0] and g[1] >= n[1] for g, n in zip(got, needs))  # every batch fits its widths
    assert widths.compiled == [(64, 32), (64, 64), (128, 64)]              # three growths, three compiled sets
    assert got == [(64, 32), (64, 32), (64, 32), (64, 64), (64, 32), (128, 64), (64, 64), (64, 32)]


def test_plan_says_how_training_widths_are_padded(workdir):
    """The run plan's `training widths:` line: the padding rule and the widest widths, from the same rule the
    trainer pads with (RolloutPlan.widths); with the compile cache the widths are fixed at those maxima."""
    import math
    from mindrl.config.plan import plan_run

    def widths_line(**over):
        plan = plan_run(make_config(workdir, "widths", **over), 1)
        lines = [x for x in plan.lines() if x.startswith("  training widths: ")]
        assert len(lines) == 1
        return plan.rollout, lines[0]

    ro, line = widths_line()
    p, r = ro.max_prompt_length, ro.max_tokens
    two = (2 ** math.ceil(math.log2(max(p, 8))), 2 ** math.ceil(math.log2(max(r, 4))))
    assert ro.widths(p, r) == two and not ro.static_shapes
    assert f"padded to the next power of two, at most {two[0]} and {two[1]} positions" in line
    assert "never shrink" in line
    ro, line = widths_line(**{"rl_config.pad_to_multiple_of": 3})
    three = (3 * math.ceil(p / 3), 3 * math.ceil(r / 3))
    assert ro.widths(p, r) == three and ro.widths(1, 1) == (3, 3)
    assert f"padded to the next multiple of 3, at most {three[0]} and {three[1]} positions" in line
    ro, line = widths_line(**{"rl_config.pad_to_multiple_of": 3, "runtime.enable_compile_cache": "true"})
    assert ro.static_shapes
    assert line.startswith(f"  training widths: {three[0]} prompt and {three[1]} response positions for every batch")


def test_single_update_reuses_rollout_log_probs(workdir):
    from mindrl.trainer import RLTrainer
    one = RLTrainer(make_config(workdir, "one", **{"rl_config.train_iters": 1, "actor_config.save": "null",
                                                    "actor_config.save_interval": 0, "eval.path": "null"}))
    m1 = one.train_step()
    two = RLTrainer(make_config(workdir, "two", **{"rl_config.train_iters": 1, "rl_config.mini_batch_size": 2,
                                                    "actor_config.save": "null", "actor_config.save_interval": 0,
                                                    "eval.path": "null"}))
    m2 = two.train_step()
    assert m1["timing/old_log_p"] == 0.0 and m2["timing/old_log_p"] > 0.0
    # with the rollout's log-probs as old policy, the first update's ratio is 1 (up to float error)
    assert m1["actor/ppo_kl"] == pytest.approx(0.0, abs=1e-5)
    assert m1["actor/pg_clipfrac"] == 0.0


def test_pg_loss_at_ratio_one_matches_numpy(workdir):
    """At ratio 1 the token-mean surrogate is -sum(A * mask) / sum(mask): check one micro-step against numpy."""
    from mindrl.trainer import RLTrainer
    # one row per response: the rows below are not groups of one prompt (test_shared_prompt.py packs groups)
    t = RLTrainer(make_config(workdir, "pg", **{"rl_config.train_iters": 1, "actor_config.save": "null",
                                                 "actor_config.save_interval": 0, "eval.path": "null",
                                                 "rl_config.share_prompt": "false"}))
    rng = np.random.default_rng(0)
    ids = rng.integers(3, 150, size=(8, 16)).astype(np.int32)
    attn = np.ones_like(ids)
    resp = np.ones((8, 8), np.float32)
    resp[3, 5:] = 0
    from mindrl.models.lm import PretrainedLM
    old = PretrainedLM(t.policy.net, t.run.model_config).log_probs(ids, attn)[:, -8:].astype(np.float64)
    adv = rng.normal(size=(8, 1)).astype(np.float32) * resp
    denom = float(resp.sum())
    loss, pg, clipfrac, ppo_kl, kl, ent = t.policy.updater.micro_step(
        {"input_ids": ids, "attention_mask": attn, "loss_mask": resp, "old_log_probs": old, "advantages": adv,
         "ref_log_probs": np.zeros_like(old)}, denom)
    assert pg == pytest.approx(-(adv.astype(np.float64) * resp).sum() / denom, rel=1e-4, abs=1e-6)
    assert abs(ppo_kl) < 1e-5


def test_config_errors_fail_before_compiling(workdir, tmp_path):
    cmd = [sys.executable, "-m", "mindrl.cli", "train", "--config", os.path.join(ROOT, "examples", "grpo", "tiny_math.yaml"),
           "rl_config.mini_batch_size=24"]
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert "rl_config.mini_batch_size" in res.stderr and "does not divide" in res.stderr
    res = subprocess.run(cmd[:-1] + ["rl_config.verifier_functon=[acc]"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 2 and "verifier_function" in res.stderr  # did-you-mean suggestion


def test_pruning_never_deletes_the_checkpoint_just_written(tmp_path):
    """A new run saving into a directory with higher-numbered checkpoints of an older run."""
    from mindrl.trainer import checkpoint as ck

    def save(root, step):
        pending = ck.begin(root, step)
        os.makedirs(os.path.join(pending, "policy"))
        open(os.path.join(pending, "policy", "model.safetensors"), "w").write("x")
        ck.save_trainer_state(pending, {"step": step})
        ck.finalize(root, step, keep_last=2)

    root = str(tmp_path)
    for step in (30, 60):  # the older run
        save(root, step)
    for step in (5, 10, 15):  # the new run, keep_last=2
        save(root, step)
    assert sorted(os.listdir(root)) == ["iter_0000010", "iter_0000015", "iter_0000030", "iter_0000060",
                                        "latest_checkpointed_iteration.txt"]
    assert ck.resolve(root).endswith("iter_0000015")
    ck.verify(ck.resolve(root))


def test_evaluation_reuses_the_rollouts_prefill_graph(workdir):
    """Held-out greedy evaluation (1 sample per prompt) prefills as many prompts per call as the rollout does (its
    batch over its samples per prompt), so it runs the rollout's prefill graph instead of compiling one for the
    whole pool and keeping its buffers too."""
    from mindrl.trainer import RLTrainer
    t = RLTrainer(make_config(workdir, "prefill_rows", **{"rl_config.train_iters": 1, "actor_config.save": "null",
                                                           "actor_config.save_interval": 0}))
    gen, batch = t.policy.generator, t.run.plan.batch
    rows = batch.rollout_batch // batch.samples_per_prompt
    assert batch.samples_per_prompt > 1 and rows < gen.max_batch  # else the rollout's prefill fills the pool
    from conftest import record_prefill_rows
    calls = record_prefill_rows(gen)
    t.train_step()
    rollout_calls = len(calls)
    metrics = t.evaluate()
    assert rollout_calls and len(calls) > rollout_calls and set(calls) == {rows}
    assert metrics["eval/num_samples"] == len(t.evaluate.data()[0])
