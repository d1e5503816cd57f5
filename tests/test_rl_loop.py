"""The one RL loop, per estimator and per KL placement: one step's advantages and loss equal a float64 numpy
reference computed here from the same rollout (written out with loops, from the papers' formulas)."""
import math
import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    from conftest import make_grpo_workdir
    return make_grpo_workdir(tmp_path_factory.mktemp("loop"))


def trainer_for(workdir, **over):
    from conftest import as_overrides, tiny_run_settings
    from mindrl.config import load_train_config
    from mindrl.trainer import RLTrainer
    settings = tiny_run_settings(workdir, workdir / "logs", **{"rl_config.micro_batch_size": 16,
                                                               "generate_config.max_tokens": 6})
    settings.update(over)
    return RLTrainer(load_train_config(os.path.join(ROOT, "examples", "grpo", "tiny_math.yaml"),
                                       as_overrides(settings)))


# ---------------------------------------------------------------------------------------------
# float64 references

def groups_of(group):
    out = {}
    for i, g in enumerate(group):
        out.setdefault(int(g), []).append(i)
    return out.values()


def whiten(x, m):
    vals = [x[i][j] for i in range(len(x)) for j in range(len(x[0])) if m[i][j] > 0]
    mu = sum(vals) / len(vals)
    var = sum((v - mu) ** 2 for v in vals) / (len(vals) - 1)
    return np.array([[(x[i][j] - mu) / math.sqrt(var + 1e-8) if m[i][j] > 0 else 0.0 for j in range(len(x[0]))]
                     for i in range(len(x))])


def kl_est(lp, ref, kind):
    d = lp - ref
    if kind in ("kl", "k1"):
        return d
    if kind in ("mse", "k2"):
        return 0.5 * d * d
    if kind == "abs":
        return abs(d)
    nd = min(max(-d, -20.0), 20.0)
    return min(max(math.exp(nd) - nd - 1.0, -10.0), 10.0)


def reference_advantages(exp, rl, beta):
    """Token rewards (score on the last token, minus beta * KL per token when KL is in the reward), then the
    estimator, all in float64 from the experience's raw fields."""
    n, t = exp.response_mask.shape
    resp, loss = exp.response_mask.astype(np.float64), exp.loss_mask.astype(np.float64)
    kl = np.zeros((n, t))
    if rl.use_kl_in_reward:
        for i in range(n):
            for j in range(t):
                if resp[i, j]:
                    kl[i, j] = kl_est(float(exp.old_log_probs[i, j]), float(exp.ref_log_probs[i, j]), rl.kl_penalty)
    rewards = -beta * kl
    for i in range(n):
        last = int(resp[i].sum()) - 1
        rewards[i, last] += float(exp.scores[i])
    totals = [float(exp.scores[i]) - beta * kl[i].sum() for i in range(n)]
    est = rl.adv_estimator
    seq = [0.0] * n
    if est in ("grpo", "dr_grpo", "rloo", "reinforce_plus_plus_baseline"):
        for idx in groups_of(exp.group):
            vals = [totals[i] for i in idx]
            mu = sum(vals) / len(vals)
            sd = math.sqrt(sum((v - mu) ** 2 for v in vals) / (len(vals) - 1))
            for i in idx:
                if est == "rloo":
                    seq[i] = totals[i] - (sum(vals) - totals[i]) / (len(vals) - 1)
                elif max(vals) == min(vals) and est == "grpo":
                    seq[i] = 0.0
                elif est == "grpo":
                    seq[i] = (totals[i] - mu) / (sd + 1e-6)
                else:
                    seq[i] = totals[i] - mu
        adv = np.array([[seq[i] * loss[i, j] for j in range(t)] for i in range(n)])
        return whiten(adv, loss) if est == "reinforce_plus_plus_baseline" else adv
    if est == "reinforce_plus_plus":
        ret = np.zeros((n, t))
        for i in range(n):
            g = 0.0
            for j in reversed(range(t)):
                g = rewards[i, j] + rl.gamma * g
                ret[i, j] = g if loss[i, j] else 0.0
                g = g * loss[i, j]
        return whiten(ret, loss)
    raise AssertionError(est)


def reference_loss(exp, logp, rl):
    """PPO clipped surrogate (or GSPO's sequence ratio) + KL in the loss, aggregated as configured, float64."""
    n, t = logp.shape
    m = exp.loss_mask.astype(np.float64)
    per_tok = np.zeros((n, t))
    for i in range(n):
        if rl.policy_loss == "gspo":
            valid = [j for j in range(t) if m[i, j]]
            s = math.exp(sum(logp[i, j] - exp.old_log_probs[i, j] for j in valid) / max(len(valid), 1))
        for j in range(t):
            a = float(exp.advantages[i, j])
            r = s if rl.policy_loss == "gspo" else math.exp(logp[i, j] - exp.old_log_probs[i, j])
            rc = min(max(r, 1 - rl.clip_ratio_low), 1 + rl.clip_ratio_high)
            per_tok[i, j] = max(-a * r, -a * rc)
            if rl.use_kl_in_loss and rl.kl_coef > 0:
                per_tok[i, j] += rl.kl_coef * kl_est(logp[i, j], float(exp.ref_log_probs[i, j]), rl.kl_penalty)
    if rl.loss_agg_mode == "token-mean":
        return (per_tok * m).sum() / m.sum()
    rows = [i for i in range(n) if m[i].sum() > 0]
    return sum((per_tok[i] * m[i]).sum() / m[i].sum() for i in rows) / len(rows)


CASES = {
    "grpo": {},
    "grpo_kl_in_loss": {"rl_config.kl_coef": 0.05, "rl_config.kl_penalty": "k3"},
    "grpo_kl_in_reward": {"rl_config.kl_coef": 0.05, "rl_config.use_kl_in_reward": "true",
                          "rl_config.kl_penalty": "k1"},
    "dr_grpo": {"rl_config.adv_estimator": "dr_grpo", "rl_config.loss_agg_mode": "seq-mean-token-mean"},
    "rloo": {"rl_config.adv_estimator": "rloo"},
    "reinforce_plus_plus_kl_adaptive": {
        "rl_config.adv_estimator": "reinforce_plus_plus", "rl_config.gamma": 0.9, "rl_config.kl_coef": 0.1,
        "rl_config.use_kl_in_reward": "true", "rl_config.kl_ctrl_type": "adaptive", "rl_config.kl_target": 1e-6,
        "rl_config.kl_horizon": 8, "rl_config.kl_penalty": "mse"},
    "reinforce_plus_plus_baseline": {"rl_config.adv_estimator": "reinforce_plus_plus_baseline"},
    "gspo": {"rl_config.policy_loss": "gspo", "rl_config.loss_agg_mode": "seq-mean-token-mean"},
}


@pytest.mark.parametrize("case", list(CASES))
def test_one_step_matches_float64_reference(workdir, case):
    from mindrl.trainer.metrics import Timers
    t = trainer_for(workdir, **CASES[case])
    rl = t.cfg.rl_config
    assert (t.reference is not None) == (rl.kl_coef > 0)  # both KL placements build the reference model
    exp, _ = t.maker.make(Timers())
    beta = t.kl_ctrl.value if t.kl_ctrl is not None else 0.0
    metrics = t.compute_advantages(exp)
    exp.validate()
    want = reference_advantages(exp, rl, beta)
    assert np.abs(want).max() > 1e-3, "degenerate rollout: no advantage signal"
    np.testing.assert_allclose(exp.advantages, want, rtol=1e-4, atol=1e-5)

    if rl.use_kl_in_reward:
        per_row = [np.mean([kl_est(float(exp.old_log_probs[i, j]), float(exp.ref_log_probs[i, j]), rl.kl_penalty)
                            for j in range(exp.response_width) if exp.response_mask[i, j]]) for i in range(len(exp))]
        assert metrics["actor/reward_kl_penalty"] == pytest.approx(np.mean(per_row), rel=1e-4, abs=1e-9)
        assert metrics["actor/reward_kl_penalty_coeff"] == beta
        if rl.kl_ctrl_type == "adaptive":  # one controller step with the batch's KL and N sequences
            e = min(max(metrics["actor/reward_kl_penalty"] / rl.kl_target - 1, -0.2), 0.2)
            assert t.kl_ctrl.value == pytest.approx(beta * (1 + e * len(exp) / rl.kl_horizon), rel=1e-12)

    logp = t.policy.log_probs(exp).astype(np.float64)
    from mindrl.algorithms.denominators import loss_denominator
    ref = exp.ref_log_probs if exp.ref_log_probs is not None else np.zeros_like(exp.old_log_probs)
    outs = t.policy.updater.micro_step([exp.input_ids, exp.attention_mask, exp.loss_mask, exp.old_log_probs,
                                        exp.advantages, ref], loss_denominator(exp.loss_mask, rl.loss_agg_mode))
    assert outs[0] == pytest.approx(reference_loss(exp, logp, rl), rel=1e-4, abs=1e-6)


def test_train_step_reports_named_metrics(workdir):
    t = trainer_for(workdir, **CASES["grpo_kl_in_reward"])
    m = t.train_step()
    for key in ("actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/kl_loss", "actor/entropy",
                "actor/grad_norm", "actor/lr", "actor/reward_kl_penalty", "actor/reward_kl_penalty_coeff",
                "grpo/score/mean", "critic/score/mean", "critic/rewards/mean", "critic/advantages/mean",
                "timing/adv", "timing/reference_model", "e2e_tps"):
        assert key in m and np.isfinite(m[key]), key
    assert m["actor/kl_loss"] == 0.0 and m["timing/reference_model"] > 0  # the KL went into the reward


@pytest.fixture(scope="module")
def other_policy(workdir):
    """A second random model of the same shape: as the reference it puts the KL far from zero."""
    from mindrl.models.lm import PretrainedLM, build_network
    from mindrl.models.config import load_model_config
    cfg = load_model_config(str(workdir / "policy"))
    PretrainedLM(build_network(cfg, seed=99), cfg).save_pretrained(str(workdir / "other"))
    return workdir / "other"


@pytest.mark.parametrize("reference, direction", [("policy", -1), ("other", +1)])
def test_adaptive_kl_coefficient_moves_both_ways(workdir, other_policy, reference, direction):
    """Reference = the policy: KL ~ 0, below the target, so beta shrinks. Reference = another model: KL far above
    the target, so beta grows. Over several steps, and restored exactly on resume."""
    t = trainer_for(workdir, **{"rl_config.kl_coef": 0.1, "rl_config.use_kl_in_reward": "true",
                                "rl_config.kl_ctrl_type": "adaptive", "rl_config.kl_target": 0.005,
                                "rl_config.kl_horizon": 64, "rl_config.kl_penalty": "k3", "rl_config.train_iters": 3,
                                "ref.ref_model_load_path": str(workdir / reference)})
    values = [t.kl_ctrl.value]
    for _ in range(3):
        m = t.train_step()
        values.append(t.kl_ctrl.value)
        assert m["actor/reward_kl_penalty_coeff"] == values[-2]
        assert (m["actor/reward_kl_penalty"] - 0.005) * direction > 0
    steps = np.diff(values)
    assert np.all(steps * direction > 0), values
