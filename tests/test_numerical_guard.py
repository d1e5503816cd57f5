"""Non-finite rewards, losses and gradients: the update is skipped (weights and optimizer state unchanged), the step
says which quantity went bad, the run stops after rl_config.max_bad_steps such steps in a row, and nothing
non-finite is ever written into a checkpoint."""
import os
import re
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
CONFIG = os.path.join(ROOT, "examples", "grpo", "tiny_math.yaml")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    from conftest import make_grpo_workdir
    d = make_grpo_workdir(tmp_path_factory.mktemp("guard"))
    (d / "nan_reward.py").write_text("from mindrl.rewards import register_reward\n\n@register_reward('nan_after')\n"
                                     "def nan_after(response, label):\n    return float('nan')\n")
    return d


def trainer_for(d, run, **over):
    from conftest import as_overrides, tiny_run_settings
    from mindrl.config import load_train_config
    from mindrl.trainer import RLTrainer
    settings = tiny_run_settings(d, d / run / "logs", **{"rl_config.train_iters": 6, "rl_config.max_bad_steps": 2,
                                                         "actor_config.save": str(d / run / "ckpt"),
                                                         "actor_config.save_interval": 1,
                                                         "actor_config.keep_last": 0})
    settings.update(over)
    return RLTrainer(load_train_config(CONFIG, as_overrides(settings)))


def optimizer_state(updater):
    return {p.name: p.asnumpy().copy() for p in updater.optimizer.state_parameters()}


def test_huge_learning_rate_skips_updates_and_stops(workdir):
    from mindrl.models.weights import TensorSource
    from mindrl.trainer.guard import TrainingDiverged
    t = trainer_for(workdir, "lr", **{"actor_config.lr": 1e30})
    first = t.train_step()                       # a finite gradient, applied with lr 1e30: weights explode
    assert np.isfinite(first["actor/grad_norm"]) and first["train/skipped_updates"] == 0
    t.save()
    weights, moments = t.policy.state_dict(), optimizer_state(t.policy.updater)
    second = t.train_step()                      # the exploded weights give a non-finite loss: skipped
    assert not np.isfinite(second["actor/grad_norm"]) and second["train/skipped_updates"] == 1
    assert t.guard.bad_steps == 1
    after = t.policy.state_dict()
    assert all(np.array_equal(weights[k], after[k]) for k in weights)  # weights untouched
    assert all(np.array_equal(v, optimizer_state(t.policy.updater)[k]) for k, v in moments.items())
    with pytest.raises(TrainingDiverged, match=r"2 steps in a row .*actor/grad_norm") as err:
        t.train_step()
    # checkpoint 1 holds the exploded weights of step 1's update: it is not offered
    assert "iter_0000001" not in str(err.value) and "No checkpoint of this run holds weights from before" in \
        str(err.value), str(err.value)
    # every checkpoint written holds finite numbers only
    for name in os.listdir(workdir / "lr" / "ckpt"):
        if name.startswith("iter_"):
            src = TensorSource(str(workdir / "lr" / "ckpt" / name / "policy"))
            assert all(np.isfinite(src.get(n)).all() for n in src.names()), name


def test_each_update_is_reported_as_it_happened_and_no_diverged_checkpoint_is_offered(workdir, caplog):
    """Two updates per step (ppo_epochs 2) with lr 1e30 from step 2 on: step 2's first update is applied (the
    weights reach about 1e30) and its second is skipped. The guard said the step's updates were skipped and the
    weights unchanged, and offered checkpoint 2, which holds them. It now says what happened to each update and
    offers only a checkpoint whose weights gave finite losses and gradients afterwards (checkpoint 1)."""
    from mindrl.trainer import checkpoint as ck
    from mindrl.trainer.guard import TrainingDiverged
    t = trainer_for(workdir, "per_update", **{"rl_config.ppo_epochs": 2, "actor_config.lr": 1e30})
    t.policy.lr_at = lambda step: 1e-3 if step == 0 else 1e30
    caplog.set_level("WARNING", logger="mindrl.train")
    with pytest.raises(TrainingDiverged) as err:
        t.fit()
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    step2 = [w for w in warnings if w.startswith("step 2:")]
    assert len(step2) == 1 and re.search(r"actor update 1 of 2 applied, update 2 skipped \(gradient norm "
                                         r"(inf|nan)\)", step2[0]), warnings
    assert "unchanged" not in step2[0] and "weights changed" in step2[0], step2[0]
    message = str(err.value)
    assert message.startswith("2 steps in a row") and "step 2: actor update 1 of 2 applied" in message, message
    assert "step 3: actor updates 1-2 of 2 skipped" in message and "not updated" not in message, message
    offered = str(workdir / "per_update" / "ckpt" / "iter_0000001")
    assert f"actor_config.load={offered}" in message and "iter_0000002" not in message, message
    ck.verify(offered)
    src = t.policy.state_dict()
    assert max(float(np.abs(v).max()) for v in src.values()) > 1e20  # step 2's applied update: weights exploded


def test_non_finite_weights_after_an_applied_update_stop_the_run(workdir):
    """An update applied with a finite gradient can still leave non-finite weights (here injected into the
    weights the optimizer step updates): the run stops at that step naming the update, with no checkpoint of it."""
    import mindspore as ms
    from mindrl.trainer.guard import TrainingDiverged
    t = trainer_for(workdir, "weights_inf")
    up = t.policy.updater
    apply_cell = up.apply_cell

    def poisoned(*args):
        if t.step == 1:  # the step's own check (in the optimizer's graph) finds what the step leaves
            p = t.policy.net.trainable_params()[0]
            p.set_data(ms.Tensor(np.full(p.shape, np.inf, np.float32)))
        return apply_cell(*args)

    up.apply_cell = poisoned
    with pytest.raises(TrainingDiverged, match=r"step 2: actor update 1 of 1 was applied and left non-finite "
                                               r"weights \(.+\); stopping at once") as err:
        t.fit()
    assert t.step == 2 and "iter_0000001" in str(err.value), str(err.value)
    assert sorted(n for n in os.listdir(workdir / "weights_inf" / "ckpt") if n.startswith("iter_")) == ["iter_0000001"]


def test_non_finite_weights_are_never_saved(workdir):
    import mindspore as ms
    from mindrl.trainer.guard import TrainingDiverged
    t = trainer_for(workdir, "nosave")
    p = t.policy.net.trainable_params()[0]
    p.set_data(ms.Tensor(np.full(p.shape, np.nan, np.float32)))
    with pytest.raises(TrainingDiverged, match=r"non-finite values; no checkpoint was written"):
        t.save()
    assert not (workdir / "nosave" / "ckpt").exists() or not any(
        n.startswith("iter_") for n in os.listdir(workdir / "nosave" / "ckpt"))


def test_nan_from_a_reward_function_stops_the_step_naming_it(workdir):
    """A reward function's NaN is a failed reward call (reward containment): without rl_config.reward_fallback the
    step stops with an error naming the function and the sample, before any update."""
    from mindrl.rewards.computer import RewardError
    t = trainer_for(workdir, "reward_fn", **{"rl_config.custom_reward_file": str(workdir / "nan_reward.py"),
                                             "rl_config.verifier_function": "[nan_after]",
                                             "rl_config.verifier_weight": "[1.0]", "actor_config.save": "null",
                                             "actor_config.save_interval": 0, "actor_config.keep_last": 2})
    before = t.policy.state_dict()
    with pytest.raises(RewardError, match=r"reward function 'nan_after' failed on sample \d+ \(response .*\): "
                                          r"returned nan"):
        t.train_step()
    after = t.policy.state_dict()
    assert all(np.array_equal(before[k], after[k]) for k in before)


def test_cli_reward_failure_is_one_line_and_exit_1(workdir):
    """Through `mindrl train`: a reward function's failure with the default reward_fallback (null) is a runtime
    failure: exit status 1 and one line naming the function and the sample, no traceback."""
    import subprocess
    from conftest import as_overrides, tiny_run_settings
    settings = tiny_run_settings(workdir, workdir / "cli_reward" / "logs", **{
        "rl_config.custom_reward_file": str(workdir / "nan_reward.py"), "rl_config.verifier_function": "[nan_after]",
        "rl_config.verifier_weight": "[1.0]"})
    res = subprocess.run([sys.executable, "-m", "mindrl.cli", "train", "--config", CONFIG] + as_overrides(settings),
                         cwd=ROOT, env=dict(os.environ, GLOG_v="3"), capture_output=True, text=True, timeout=600)
    assert res.returncode == 1, res.stderr[-2000:]
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    last = res.stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"mindrl train: error: reward function 'nan_after' failed on sample \d+ \(response '.*', "
                        r"label '\d+'\): returned nan, not a finite number\. Set rl_config\.reward_fallback to a "
                        r"number to score failed samples with it and go on", last), last


def test_non_finite_score_skips_the_step_and_fit_stops(workdir):
    """A non-finite sequence score that no reward function returned (a reward model's NaN) skips the step's updates;
    max_bad_steps such steps in a row stop the run."""
    from mindrl.trainer.guard import TrainingDiverged
    t = trainer_for(workdir, "score", **{"actor_config.save": "null", "actor_config.save_interval": 0,
                                         "actor_config.keep_last": 2})
    make = t.maker.make

    def poisoned(timers):  # from the second step on, as a reward model with NaN in its output would score
        exp, metrics = make(timers)
        if t.step >= 1:
            exp.score[0] = np.nan
        return exp, metrics

    t.maker.make = poisoned
    first = t.train_step()
    assert first["train/skipped_updates"] == 0
    before = t.policy.state_dict()
    with pytest.raises(TrainingDiverged, match=r"2 steps in a row had a non-finite reward"):
        t.fit()
    assert t.step == 3
    after = t.policy.state_dict()
    assert all(np.array_equal(before[k], after[k]) for k in before)


def test_cli_exits_3_naming_the_quantity(workdir):
    import subprocess
    from conftest import as_overrides, tiny_run_settings
    settings = tiny_run_settings(workdir, workdir / "cli" / "logs", **{
        "rl_config.train_iters": 4, "rl_config.max_bad_steps": 1, "actor_config.lr": 1e30, "rl_config.ppo_epochs": 2})
    res = subprocess.run([sys.executable, "-m", "mindrl.cli", "train", "--config", CONFIG] + as_overrides(settings),
                         cwd=ROOT, env=dict(os.environ, GLOG_v="3"), capture_output=True, text=True, timeout=600)
    assert res.returncode == 3, res.stderr[-2000:]
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("mindrl train: error: 1 steps in a row had a non-finite actor/") and "step 1" in last
    # the first of the step's two updates was applied (lr 1e30: the weights exploded), the second skipped
    assert re.search(r"step 1: actor update 1 of 2 applied, update 2 skipped \(gradient norm (inf|nan)\)",
                     last) and "not updated" not in last, last
