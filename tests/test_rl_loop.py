"""The one RL loop, per estimator and per KL placement: one step's advantages and loss equal a float64 numpy
reference computed here from the same rollout (written out with loops, from the papers' formulas). PPO (gae) adds
the returns, the critic's clipped value loss across two epochs, and the sequence score's clipping."""
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


@pytest.fixture(scope="module")
def ppo_models(workdir):
    """What the PPO cases need beside the policy: a value model with a random head scaled to values of order 1 (a
    zero head would make every V_t 0 and leave GAE's value terms untested), another random model as the reference
    (the KL far from 0), and a dense reward, ``chars``, so that scores vary from row to row."""
    from mindrl.models.config import load_model_config
    from mindrl.models.lm import PretrainedLM, build_network
    from mindrl.models.weights import state_numpy
    from mindrl.trainer.roles.base import export_hf
    from mindrl.trainer.roles.critic import value_model_hf_config
    cfg = load_model_config(str(workdir / "policy"))
    if not (workdir / "value").exists():
        tensors = state_numpy(build_network(cfg, "reward", seed=11))
        tensors["score.weight"] = tensors["score.weight"] * 5.0
        export_hf(tensors, cfg, str(workdir / "value"), value_model_hf_config(cfg, 0),
                  os.path.join(ROOT, "examples", "tiny", "tokenizer"))
    if not (workdir / "other").exists():
        PretrainedLM(build_network(cfg, seed=99), cfg).save_pretrained(str(workdir / "other"))
    (workdir / "dense.py").write_text(
        "from mindrl.rewards import register_reward\n\n@register_reward('chars')\n"
        "def chars(response, label):\n    return sum(ord(c) % 7 for c in response) / 40.0\n")
    return workdir


def chars_reward(text):
    """``chars`` of ppo_models' dense.py, written again here: the reference's own copy of the rule."""
    return sum(ord(c) % 7 for c in text) / 40.0


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


def reference_gae(rewards, values, mask, gamma, lam, whiten_adv):
    """GAE (Schulman et al. 2016) per row over its valid tokens, from the last one back: delta_t = r_t +
    gamma V_{t+1} - V_t, A_t = delta_t + gamma lam A_{t+1}, V and A 0 after the last token; R_t = A_t + V_t (before
    whitening). Returns (advantages, returns), float64."""
    n, t = rewards.shape
    adv, ret = np.zeros((n, t)), np.zeros((n, t))
    for i in range(n):
        a_next = v_next = 0.0
        for j in reversed([j for j in range(t) if mask[i, j] > 0]):
            v = float(values[i, j])
            a_next = float(rewards[i, j]) + gamma * v_next - v + gamma * lam * a_next
            v_next = v
            adv[i, j], ret[i, j] = a_next, a_next + v
    return (whiten(adv, mask) if whiten_adv else adv), ret


def reference_value_loss(v, v_old, ret, mask, clip):
    """PPO's clipped value loss, token-mean: 0.5 * mean(max((V - R)^2, (V_old + clip(V - V_old, +-c) - R)^2)), and
    the share of tokens where the clipped term is the larger. float64."""
    total, clipped, count = 0.0, 0, 0
    for i in range(v.shape[0]):
        for j in range(v.shape[1]):
            if mask[i, j] > 0:
                vc = float(v_old[i, j]) + min(max(float(v[i, j]) - float(v_old[i, j]), -clip), clip)
                e, ec = (float(v[i, j]) - float(ret[i, j])) ** 2, (vc - float(ret[i, j])) ** 2
                total, clipped, count = total + max(e, ec), clipped + (ec > e), count + 1
    return 0.5 * total / count, clipped / count


def reference_advantages(exp, rl, beta, scores=None):
    """Token rewards (score on the last token, minus beta * KL per token when KL is in the reward), then the
    estimator, all in float64 from the experience's raw fields (``scores``: the sequence scores to use instead of
    the experience's). Returns (advantages, returns or None, token rewards)."""
    n, t = exp.response_mask.shape
    resp, loss = exp.response_mask.astype(np.float64), exp.loss_mask.astype(np.float64)
    kl = np.zeros((n, t))
    if rl.use_kl_in_reward:
        for i in range(n):
            for j in range(t):
                if resp[i, j]:
                    kl[i, j] = kl_est(float(exp.old_log_probs[i, j]), float(exp.ref_log_probs[i, j]), rl.kl_penalty)
    scores = exp.score if scores is None else scores
    rewards = -beta * kl
    for i in range(n):
        last = int(resp[i].sum()) - 1
        rewards[i, last] += float(scores[i])
    totals = [float(scores[i]) - beta * kl[i].sum() for i in range(n)]
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
        return (whiten(adv, loss) if est == "reinforce_plus_plus_baseline" else adv), None, rewards
    if est == "reinforce_plus_plus":
        ret = np.zeros((n, t))
        for i in range(n):
            g = 0.0
            for j in reversed(range(t)):
                g = rewards[i, j] + rl.gamma * g
                ret[i, j] = g if loss[i, j] else 0.0
                g = g * loss[i, j]
        return whiten(ret, loss), None, rewards
    if est == "gae":
        return (*reference_gae(rewards, exp.values, loss, rl.gamma, rl.lam, rl.advantage_whiten), rewards)
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
# PPO: a critic with values of order 1 ({w} is the workdir), the dense reward, a reference far from the policy, and
# 40 stop tokens, so that responses end at different lengths and GAE's last-token handling is exercised
PPO = {"rl_config.adv_estimator": "gae", "critic_config.load": "{w}/value", "critic_config.lr": 1e-3,
       "rl_config.custom_reward_file": "{w}/dense.py",
       "rl_config.verifier_function": "[chars]", "rl_config.verifier_weight": "[1.0]",
       "generate_config.stop_token_ids": "[" + ",".join(map(str, range(100, 140))) + "]"}
CASES.update({
    "gae_kl_in_reward": {**PPO, "rl_config.kl_coef": 0.05, "rl_config.use_kl_in_reward": "true",
                         "rl_config.kl_penalty": "k1", "ref.ref_model_load_path": "{w}/other"},
    "gae_unwhitened": {**PPO, "rl_config.gamma": 0.9, "rl_config.lam": 0.8, "rl_config.advantage_whiten": "false"},
    # two updates per step: the critic's values from a pass of their own, its update reading the host's returns
    "gae_two_epochs": {**PPO, "rl_config.ppo_epochs": 2},
})


def case_settings(case, workdir):
    return {k: v.format(w=workdir) if isinstance(v, str) else v for k, v in CASES[case].items()}


@pytest.mark.parametrize("case", list(CASES))
def test_one_step_matches_float64_reference(ppo_models, case):
    from mindrl.trainer.metrics import Timers, rollout_metrics
    workdir = ppo_models
    t = trainer_for(workdir, **case_settings(case, workdir))
    rl = t.cfg.rl_config
    assert (t.reference is not None) == (rl.kl_coef > 0)  # both KL placements build the reference model
    exp, _ = t.maker.make(Timers())
    beta = t.kl_ctrl.value if t.kl_ctrl is not None else 0.0
    critic_outs = None
    if t.critic is not None:
        assert t.critic.values_in_update == (t.run.plan.batch.updates == 1)
    if t.critic is not None and t.critic.values_in_update:  # the values come from the critic's update
        assert exp.values is None  # no pass of their own
        metrics = t.compute_rewards(exp)
        from mindrl.algorithms.denominators import loss_denominator
        critic_outs = t.critic.updater.micro_step(
            {"input_ids": exp.input_ids, "attention_mask": exp.attention_mask, "loss_mask": exp.loss_mask,
             "token_rewards": exp.token_rewards}, loss_denominator(exp.loss_mask, "token-mean"))
        exp.values = t.critic.values(exp)  # the value pass, which its forward replaces: the same values
        np.testing.assert_allclose(critic_outs[-1] * exp.loss_mask, exp.values * exp.loss_mask, atol=1e-6)
        t.compute_estimator(exp)
    else:
        metrics = t.compute_advantages(exp)
    exp.validate()
    want, want_returns, want_rewards = reference_advantages(exp, rl, beta)
    assert np.abs(want).max() > 1e-3, "degenerate rollout: no advantage signal"
    if rl.adv_estimator in ("gae", "reinforce_plus_plus"):  # the token-level estimators
        np.testing.assert_allclose(exp.token_rewards, want_rewards, rtol=1e-5, atol=1e-6)
    else:  # the others read each sequence's total: no token rewards are built, the totals are reported
        assert exp.token_rewards is None
        np.testing.assert_allclose(exp.reward, want_rewards.sum(1), rtol=1e-6, atol=1e-9)
        reported = rollout_metrics(exp, t.run.plan.rollout.max_tokens, t.estimator.needs_groups)
        assert reported["critic/rewards/mean"] == pytest.approx(want_rewards.sum(1).mean(), rel=1e-6, abs=1e-9)
    np.testing.assert_allclose(exp.advantages, want, rtol=1e-4, atol=1e-5)
    if rl.adv_estimator == "gae":
        lengths = exp.loss_mask.sum(1)
        assert len(set(lengths.tolist())) > 2, "every response has the same length: the masks are not exercised"
        assert np.abs(exp.values).max() > 0.1 and np.abs(exp.values[exp.loss_mask > 0]).min() > 0  # real values
        np.testing.assert_allclose(exp.returns, want_returns, rtol=1e-5, atol=1e-5)
        if not rl.advantage_whiten:  # R - V is the raw advantage
            np.testing.assert_allclose(exp.returns - exp.values * exp.loss_mask, exp.advantages, atol=1e-5)
        # the critic's clipped value loss on this rollout, its returns computed in its graph (V = V_old: no clipping)
        v = exp.values.astype(np.float64)
        vf_loss, clipfrac = reference_value_loss(v, v, want_returns, exp.loss_mask, rl.cliprange_value)
        if critic_outs is None:  # more than one update per step: a value pass, and the update reads its returns
            from mindrl.algorithms.denominators import loss_denominator
            critic_outs = t.critic.updater.micro_step(
                {"input_ids": exp.input_ids, "attention_mask": exp.attention_mask, "loss_mask": exp.loss_mask,
                 "old_values": exp.values, "returns": exp.returns}, loss_denominator(exp.loss_mask, "token-mean"))
        outs = critic_outs
        assert outs[1] == pytest.approx(vf_loss, rel=1e-5) and outs[0] == outs[1]
        assert vf_loss > 0.1 and outs[2] == clipfrac == 0.0

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
    arrays, _ = t.policy.update_arrays(exp)  # with n > 1: packed groups whose prompt is computed once
    assert (arrays["input_ids"].shape[0] < len(exp)) == t.run.plan.batch.shared_prompt
    outs = t.policy.updater.micro_step(arrays, loss_denominator(exp.loss_mask, rl.loss_agg_mode))
    assert outs[0] == pytest.approx(reference_loss(exp, logp, rl), rel=1e-4, abs=1e-6)


def token_mean(x, mask):
    return float((np.asarray(x, np.float64) * mask).sum() / mask.sum())


def reference_policy_terms(logp, old, adv, mask, clip_low, clip_high):
    """(pg_loss, pg_clipfrac, ppo_kl) of PPO's clipped surrogate, token-mean, float64."""
    loss, clipped, kl, count = 0.0, 0, 0.0, 0
    for i in range(logp.shape[0]):
        for j in range(logp.shape[1]):
            if mask[i, j] > 0:
                r = math.exp(float(logp[i, j]) - float(old[i, j]))
                a = float(adv[i, j])
                s, sc = -a * r, -a * min(max(r, 1 - clip_low), 1 + clip_high)
                loss, clipped = loss + max(s, sc), clipped + (sc > s)
                kl, count = kl + float(old[i, j]) - float(logp[i, j]), count + 1
    return loss / count, clipped / count, kl / count


def test_ppo_step_metrics_match_float64(ppo_models):
    """One whole PPO step (train_step: KL in the reward, GAE, critic update, actor update), two epochs over one
    mini-batch of two micro-batches. The second epoch sees values and log-probs that the first optimizer step
    moved, so cliprange_value and clip_ratio act. Every critic/* and actor/* loss metric is the mean over the two
    epochs of a float64 reference computed from the rollout and from the values / log-probs the networks give
    after each optimizer step (read between the steps by wrapping the updaters' apply)."""
    w = ppo_models
    t = trainer_for(w, **case_settings("gae_kl_in_reward", w), **{
        "rl_config.ppo_epochs": 2, "rl_config.micro_batch_size": 8, "rl_config.cliprange_value": 0.5,
        "rl_config.clip_ratio": 0.05})
    rl = t.cfg.rl_config
    seen, after = {}, {"critic": [], "policy": []}
    make = t.maker.make

    def capture(timers):
        seen["exp"], m = make(timers)
        return seen["exp"], m

    t.maker.make = capture
    for role, read in (("critic", t.critic.values), ("policy", t.policy.log_probs)):
        updater = getattr(t, role).updater

        def apply_then_read(lr, apply=updater.apply, role=role, read=read):
            norm = apply(lr)
            after[role].append(read(seen["exp"]).astype(np.float64))
            return norm
        updater.apply = apply_then_read
    beta = t.kl_ctrl.value
    m = t.train_step()
    exp = seen["exp"]
    mask = exp.loss_mask.astype(np.float64)
    assert len(after["critic"]) == len(after["policy"]) == 2  # one optimizer step per epoch each

    want_adv, want_ret, _ = reference_advantages(exp, rl, beta)
    np.testing.assert_allclose(exp.advantages, want_adv, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(exp.returns, want_ret, rtol=1e-5, atol=1e-5)
    valid = mask > 0
    assert m["critic/returns/mean"] == pytest.approx(want_ret[valid].mean(), rel=1e-5)
    assert m["critic/advantages/max"] == pytest.approx(want_adv[valid].max(), rel=1e-4)
    assert m["critic/values/mean"] == pytest.approx(exp.values[valid].astype(np.float64).mean(), rel=1e-5)
    resid = want_ret[valid] - exp.values[valid]
    assert m["critic/vf_explained_var"] == pytest.approx(1 - resid.var() / want_ret[valid].var(), rel=1e-4, abs=1e-5)

    # critic: epoch 1 at V_old (the rollout's values), epoch 2 at the values after the first step, clipped to
    # V_old +- cliprange_value
    values = [exp.values.astype(np.float64), after["critic"][0]]
    terms = [reference_value_loss(v, exp.values, want_ret, mask, rl.cliprange_value) for v in values]
    assert terms[0][1] == 0.0 and 0.05 < terms[1][1] < 0.95, terms  # the clip acts in epoch 2, on some tokens
    assert m["critic/vf_loss"] == pytest.approx(np.mean([x[0] for x in terms]), rel=1e-5)
    assert m["critic/vf_clipfrac"] == pytest.approx(np.mean([x[1] for x in terms]), abs=1e-6)
    assert m["critic/vpred_mean"] == pytest.approx(np.mean([token_mean(v, mask) for v in values]), rel=1e-5,
                                                   abs=1e-6)

    # actor: epoch 1 at the old log-probs (ratio 1), epoch 2 at those after the first step
    logps = [exp.old_log_probs.astype(np.float64), after["policy"][0]]
    terms = [reference_policy_terms(lp, exp.old_log_probs, exp.advantages, mask, rl.clip_ratio_low,
                                    rl.clip_ratio_high) for lp in logps]
    assert terms[0][1] == 0.0 and 0.05 < terms[1][1] < 0.95, terms
    for k, name in enumerate(("actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl")):
        assert m[name] == pytest.approx(np.mean([x[k] for x in terms]), rel=1e-4, abs=1e-6), name
    assert m["actor/kl_loss"] == 0.0


@pytest.mark.parametrize("clip", [None, (0.5, 1.5)])
def test_reward_clip_range_bounds_the_scores_of_the_advantages(ppo_models, clip):
    """rl_config.reward_clip_range: each sequence score is clipped to [low, high] before the KL penalty joins the
    token rewards, and GAE runs on those. The reference recomputes the ``chars`` rule on the decoded responses and
    clips it here; without the key the scores are the rule's, unclipped, beyond the bounds on both sides."""
    from mindrl.trainer.metrics import Timers
    w = ppo_models
    over = case_settings("gae_kl_in_reward", w)
    if clip is not None:
        over["rl_config.reward_clip_range"] = f"[{clip[0]},{clip[1]}]"
    t = trainer_for(w, **over)
    rl = t.cfg.rl_config
    exp, _ = t.maker.make(Timers())
    raw = [chars_reward(t.run.tokenizer.decode(r, skip_special_tokens=True)) for r in exp.responses()]
    low, high = (0.5, 1.5) if clip is None else clip
    assert min(raw) < low and max(raw) > high, raw  # the rollout has scores beyond both bounds
    want = np.array(raw if clip is None else [min(max(x, low), high) for x in raw])
    np.testing.assert_allclose(exp.score, want, rtol=1e-6, atol=1e-7)
    beta = t.kl_ctrl.value
    assert exp.values is None  # one update per step: the critic's update gives them; here its value pass does
    exp.values = t.critic.values(exp)
    m = t.compute_advantages(exp)
    assert m["actor/reward_kl_penalty"] > 1e-3  # a KL penalty that an unclipped or clipped-after-KL score would show
    want_adv, want_ret, want_rewards = reference_advantages(exp, rl, beta, scores=want)
    np.testing.assert_allclose(exp.token_rewards, want_rewards, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(exp.advantages, want_adv, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(exp.returns, want_ret, rtol=1e-5, atol=1e-5)


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
def other_policy(ppo_models):
    """A second random model of the same shape: as the reference it puts the KL far from zero."""
    return ppo_models / "other"


@pytest.mark.parametrize("reference, direction", [("policy", -1), ("other", +1)])
def test_adaptive_kl_coefficient_moves_both_ways(workdir, other_policy, reference, direction):
    """Reference = the policy: KL ~ 0, below the target, so beta shrinks. Reference = another model: KL far above
    the target, so beta grows, at each of three steps (tests/test_ppo_loop.py resumes the adapted value)."""
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
