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
    from mindrl.trainer.loop import TrainingDiverged
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
    with pytest.raises(TrainingDiverged, match=r"2 steps in a row .*actor/grad_norm.*iter_0000001"):
        t.train_step()
    # every checkpoint written holds finite numbers only
    for name in os.listdir(workdir / "lr" / "ckpt"):
        if name.startswith("iter_"):
            src = TensorSource(str(workdir / "lr" / "ckpt" / name / "policy"))
            assert all(np.isfinite(src.get(n)).all() for n in src.names()), name


def test_non_finite_weights_are_never_saved(workdir):
    import mindspore as ms
    from mindrl.trainer.loop import TrainingDiverged
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
    from mindrl.trainer.loop import TrainingDiverged
    t = trainer_for(workdir, "score", **{"actor_config.save": "null", "actor_config.save_interval": 0,
                                         "actor_config.keep_last": 2})
    make = t.maker.make

    def poisoned(timers):  # from the second step on, as a reward model with NaN in its output would score
        exp, metrics = make(timers)
        if t.step >= 1:
            exp.scores[0] = np.nan
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
        "rl_config.train_iters": 4, "rl_config.max_bad_steps": 1, "actor_config.lr": 1e30})
    res = subprocess.run([sys.executable, "-m", "mindrl.cli", "train", "--config", CONFIG] + as_overrides(settings),
                         cwd=ROOT, env=dict(os.environ, GLOG_v="3"), capture_output=True, text=True, timeout=600)
    assert res.returncode == 3, res.stderr[-2000:]
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("mindrl train: error: 1 steps in a row had a non-finite actor/") and "step 2" in last
