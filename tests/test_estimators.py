"""Advantage estimators (RLOO, REINFORCE++, the registry), KL controllers and the GSPO loss against
independent float64 references written here from the papers' formulas (plain loops on purpose, so they do not
share structure with the vectorised code under test)."""
import math

import numpy as np
import pytest

import mindrl.algorithms as alg


pytestmark = pytest.mark.usefixtures("pynative_mode")  # ms.grad on Python lambdas needs PyNative


ms = pytest.importorskip("mindspore")
from mindspore import Tensor  # noqa: E402

from mindrl.algorithms import losses  # noqa: E402

ESTIMATORS = ["grpo", "dr_grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "gae"]


def T(x):
    return Tensor(np.asarray(x, np.float32))


# ---------------------------------------------------------------------------------------------
# float64 references


def members(ids):
    """{group id: [row indices]} in first-seen order."""
    out = {}
    for i, g in enumerate(ids):
        out.setdefault(g, []).append(i)
    return out


def ref_rloo(r, ids):
    out = [0.0] * len(r)
    for idx in members(ids).values():
        if len(idx) < 2:
            continue
        for i in idx:
            others = [float(r[j]) for j in idx if j != i]
            out[i] = float(r[i]) - sum(others) / len(others)
    return np.array(out)


def ref_group_centred(r, ids, norm_std, eps=1e-6):
    out = [0.0] * len(r)
    for idx in members(ids).values():
        vals = [float(r[i]) for i in idx]
        if len(vals) < 2 or max(vals) == min(vals):
            continue
        mu = sum(vals) / len(vals)
        sd = math.sqrt(sum((v - mu) ** 2 for v in vals) / (len(vals) - 1))
        for i in idx:
            out[i] = (r[i] - mu) / (sd + eps) if norm_std else r[i] - mu
    return np.array(out)


def ref_group_mean_baseline(r, ids):
    out = [0.0] * len(r)
    for idx in members(ids).values():
        mu = sum(float(r[i]) for i in idx) / len(idx)
        for i in idx:
            out[i] = r[i] - mu
    return np.array(out)


def ref_broadcast(a, m):
    return np.array([[a[b] if m[b][t] else 0.0 for t in range(len(m[b]))] for b in range(len(m))])


def ref_whiten(x, m, eps=1e-8):
    cells = [(b, t) for b in range(len(m)) for t in range(len(m[b])) if m[b][t]]
    mu = sum(x[c] for c in cells) / len(cells)
    var = sum((x[c] - mu) ** 2 for c in cells) / (len(cells) - 1)
    out = np.zeros(np.shape(x))
    for c in cells:
        out[c] = (x[c] - mu) / math.sqrt(var + eps)
    return out


def ref_returns(r, m, gamma):
    out = np.zeros(np.shape(r))
    for b in range(len(r)):
        n = int(sum(m[b]))  # right-padded: tokens 0..n-1 are the response
        g = 0.0
        for t in range(n - 1, -1, -1):
            g = r[b][t] + gamma * g
            out[b, t] = g
    return out


def ref_gae(r, v, m, gamma, lam):
    adv = np.zeros(np.shape(r))
    for b in range(len(r)):
        n = int(sum(m[b]))
        a_next = v_next = 0.0
        for t in range(n - 1, -1, -1):
            a_next = r[b][t] + gamma * v_next - v[b][t] + gamma * lam * a_next
            v_next = v[b][t]
            adv[b, t] = a_next
    return adv, np.where(np.asarray(m) > 0, adv + v, 0.0)


def ref_kl_token(lp, rf, name):
    d = lp - rf
    if name in ("kl", "k1"):
        return d
    if name == "abs":
        return abs(d)
    if name in ("mse", "k2"):
        return 0.5 * d * d
    x = min(max(rf - lp, -20.0), 20.0)
    return min(max(math.exp(x) - x - 1.0, -10.0), 10.0)


def ref_adaptive(value, target, horizon, kls, steps):
    for kl, n in zip(kls, steps):
        e = min(max(kl / target - 1.0, -0.2), 0.2)
        value = value * (1.0 + e * n / horizon)
    return value


def ref_gspo(lp, old, A, m, lo, hi):
    """(pg_loss, clipfrac, ppo_kl, analytic gradient d pg_loss / d lp) of sequence-level GSPO."""
    B, L = lp.shape
    nonempty = [b for b in range(B) if sum(m[b]) > 0]
    loss, grad, n_clip, n_tok, kl_sum = 0.0, np.zeros((B, L)), 0, 0, 0.0
    for b in nonempty:
        valid = [t for t in range(L) if m[b, t]]
        s = math.exp(sum(lp[b, t] - old[b, t] for t in valid) / len(valid))
        seq = 0.0
        for t in valid:
            unclipped = -A[b, t] * s
            clipped = -A[b, t] * min(max(s, 1 - lo), 1 + hi)
            seq += max(unclipped, clipped)
            n_clip += clipped > unclipped
            n_tok += 1
            kl_sum += old[b, t] - lp[b, t]
            if not clipped > unclipped:
                grad[b, t] = -A[b, t] * s / len(valid) / len(nonempty)
        loss += seq / len(valid) / len(nonempty)
    return loss, n_clip / n_tok, kl_sum / n_tok, grad


def right_padded(rng, N, L, min_len=1):
    lengths = rng.integers(min_len, L + 1, size=N)
    return (np.arange(L)[None, :] < lengths[:, None]).astype(np.float64)


# ---------------------------------------------------------------------------------------------
# RLOO, discounted returns, REINFORCE++


def test_rloo_contiguous_groups():
    rng = np.random.default_rng(100)
    r = rng.normal(size=20)
    r[5:10] = 0.3  # equal scores: every leave-one-out baseline equals the score
    got = alg.rloo_advantages(r, 5)
    assert got.dtype == np.float32 and got.shape == (20,)
    np.testing.assert_allclose(got, ref_rloo(r, [i // 5 for i in range(20)]), rtol=1e-5, atol=1e-6)
    assert np.all(np.abs(got[5:10]) < 1e-6)
    # hand example: {1, 0, 0}: 1 - 0, 0 - 0.5, 0 - 0.5
    np.testing.assert_allclose(alg.rloo_advantages([1.0, 0.0, 0.0], 3), [1.0, -0.5, -0.5], atol=1e-7)


def test_rloo_explicit_ids_unequal_sizes_and_singleton():
    rng = np.random.default_rng(101)
    ids = ["b", "a", "b", "c", "a", "b", "z", "c", "a", "a"]  # sizes 3, 4, 2 and a singleton "z"
    r = rng.normal(size=len(ids))
    got = alg.rloo_advantages(r, ids)
    np.testing.assert_allclose(got, ref_rloo(r, ids), rtol=1e-5, atol=1e-6)
    assert got[6] == 0.0
    with pytest.raises(ValueError):
        alg.rloo_advantages(np.zeros(10), 4)


def test_discounted_returns():
    rng = np.random.default_rng(102)
    m = right_padded(rng, 6, 9)
    m[2] = 0.0  # all-masked row
    r = rng.normal(size=(6, 9)) + 5.0 * (1 - m)  # junk rewards on padding must not leak into the response
    for gamma in (1.0, 0.9, 0.0):
        got = alg.discounted_returns(r, m, gamma)
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, ref_returns(r, m, gamma), rtol=1e-12, atol=1e-12)
    got = alg.discounted_returns([[0.0, 0.0, 1.0, 7.0]], [[1, 1, 1, 0]], 0.5)
    np.testing.assert_allclose(got, [[0.25, 0.5, 1.0, 0.0]], atol=1e-15)


def test_reinforce_plus_plus():
    rng = np.random.default_rng(103)
    m = right_padded(rng, 7, 8)
    r = rng.normal(size=(7, 8)) * m
    r += 3.0 * (1 - m)
    for gamma in (1.0, 0.95):
        adv, ret = alg.reinforce_plus_plus_advantages(r, m, gamma)
        assert adv.dtype == np.float32 and ret.dtype == np.float32
        want_ret = ref_returns(r, m, gamma)
        np.testing.assert_allclose(ret, want_ret, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(adv, ref_whiten(want_ret, m), rtol=1e-5, atol=1e-5)
        valid = adv[m > 0].astype(np.float64)
        assert abs(valid.mean()) < 1e-5 and valid.std(ddof=1) == pytest.approx(1.0, rel=1e-4)


def test_reinforce_plus_plus_baseline():
    rng = np.random.default_rng(104)
    m = right_padded(rng, 12, 6)
    r = rng.integers(0, 2, size=12).astype(np.float64)
    ids = [i // 4 for i in range(12)]
    want = ref_whiten(ref_broadcast(ref_group_mean_baseline(r, ids), m), m)
    got = alg.reinforce_plus_plus_baseline_advantages(r, 4, m)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    perm = rng.permutation(12)  # same groups given as shuffled explicit ids
    got_p = alg.reinforce_plus_plus_baseline_advantages(r[perm], [ids[i] for i in perm], m[perm])
    np.testing.assert_allclose(got_p, want[perm], rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# the registry


def test_registry_metadata():
    reg = alg.ADVANTAGE_ESTIMATORS
    assert set(ESTIMATORS) <= set(reg)
    for name in ESTIMATORS:
        est = alg.get_advantage_estimator(name)
        assert est is reg[name] and est.name == name and callable(est.compute)
    assert [n for n in ESTIMATORS if reg[n].needs_critic] == ["gae"]
    assert {n for n in ESTIMATORS if reg[n].needs_groups} == {"grpo", "dr_grpo", "rloo", "reinforce_plus_plus_baseline"}
    assert {n for n in ESTIMATORS if reg[n].token_level} == {"gae", "reinforce_plus_plus"}
    assert "norm_adv_by_std" in reg["grpo"].options
    assert {"gamma", "lam", "advantage_whiten"} <= set(reg["gae"].options)
    assert "gamma" in reg["reinforce_plus_plus"].options
    with pytest.raises(ValueError):
        alg.get_advantage_estimator("no_such_estimator")


@pytest.mark.parametrize("name,options", [
    ("grpo", {}), ("grpo", {"norm_adv_by_std": False}), ("dr_grpo", {}), ("rloo", {}),
    ("reinforce_plus_plus", {"gamma": 0.9}), ("reinforce_plus_plus_baseline", {}),
    ("gae", {"gamma": 0.99, "lam": 0.95}), ("gae", {"gamma": 0.9, "lam": 0.8, "advantage_whiten": False}),
])
def test_registry_compute_matches_reference(name, options):
    rng = np.random.default_rng(200)
    N, L, k = 12, 7, 4
    m = right_padded(rng, N, L)
    seq = rng.normal(size=N)
    seq[4:8] = 1.0  # a group of equal scores
    tok = rng.normal(size=(N, L)) * m
    values = rng.normal(size=(N, L))
    ids = [i // k for i in range(N)]
    inputs = alg.AdvantageInputs(seq, tok, m, k, values=values if name == "gae" else None, options=options)
    adv, ret = alg.get_advantage_estimator(name).compute(inputs)
    want_ret = None
    if name == "grpo":
        want = ref_broadcast(ref_group_centred(seq, ids, options.get("norm_adv_by_std", True)), m)
        assert np.all(adv[4:8] == 0.0)
    elif name == "dr_grpo":
        want = ref_broadcast(ref_group_centred(seq, ids, False), m)
    elif name == "rloo":
        want = ref_broadcast(ref_rloo(seq, ids), m)
    elif name == "reinforce_plus_plus":
        want_ret = ref_returns(tok, m, options["gamma"])
        want = ref_whiten(want_ret, m)
    elif name == "reinforce_plus_plus_baseline":
        want = ref_whiten(ref_broadcast(ref_group_mean_baseline(seq, ids), m), m)
    else:
        raw, want_ret = ref_gae(tok, values, m, options["gamma"], options["lam"])
        want = ref_whiten(raw, m) if options.get("advantage_whiten", True) else raw
    assert adv.shape == (N, L) and adv.dtype == np.float32
    np.testing.assert_allclose(adv, want, rtol=1e-5, atol=1e-5)
    assert np.all(adv[m == 0] == 0.0)
    if want_ret is None:
        assert ret is None
    else:
        np.testing.assert_allclose(ret, want_ret, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# KL controllers and the KL reward penalty


def test_fixed_kl_controller():
    c = alg.FixedKLController(0.05)
    for kl in (0.0, 1.0, 100.0):
        c.update(kl, 64)
    assert c.value == 0.05
    c2 = alg.make_kl_controller("fixed", 0.3)
    assert isinstance(c2, alg.FixedKLController) and c2.value == 0.3
    c2.load_state_dict(c.state_dict())
    assert c2.value == 0.05


def test_adaptive_kl_controller_direction_reference_and_clipping():
    up = alg.AdaptiveKLController(0.1, target=0.05, horizon=1000)
    down = alg.make_kl_controller("adaptive", 0.1, target=0.05, horizon=1000)
    assert isinstance(down, alg.AdaptiveKLController)
    prev_up, prev_down = up.value, down.value
    for _ in range(5):
        up.update(0.06, 32)
        down.update(0.04, 32)
        assert up.value > prev_up and down.value < prev_down
        prev_up, prev_down = up.value, down.value
    kls = [0.5, 0.3, 0.12, 0.0, 1e3, 0.1, 0.099, 0.101, 0.07]
    steps = [16, 64, 8, 128, 4, 32, 16, 16, 100]
    c = alg.AdaptiveKLController(0.2, target=0.1, horizon=500)
    for kl, n in zip(kls, steps):
        c.update(kl, n)
    assert c.value == pytest.approx(ref_adaptive(0.2, 0.1, 500, kls, steps), rel=1e-12)
    # far-off KL: the error is clipped to +-0.2, so one horizon's worth of steps scales by exactly 1.2 / 0.8
    for kl, factor in [(50.0, 1.2), (0.0, 0.8), (0.1 * 1.1, 1.1)]:
        c = alg.AdaptiveKLController(0.5, target=0.1, horizon=10)
        c.update(kl, 10)
        assert c.value == pytest.approx(0.5 * factor, rel=1e-12)


def test_adaptive_kl_controller_state_and_validation():
    c = alg.AdaptiveKLController(0.1, target=0.02, horizon=200)
    c.update(0.08, 50)
    c.update(0.01, 30)
    d = alg.AdaptiveKLController(0.9, target=0.02, horizon=200)
    d.load_state_dict(c.state_dict())
    assert d.value == c.value
    c.update(0.03, 10)
    d.update(0.03, 10)
    assert d.value == c.value
    for target, horizon in [(0.0, 100), (-0.1, 100), (0.1, 0), (0.1, -5)]:
        with pytest.raises(ValueError):
            alg.AdaptiveKLController(0.1, target, horizon)
        with pytest.raises(ValueError):
            alg.make_kl_controller("adaptive", 0.1, target, horizon)
    with pytest.raises(ValueError):
        alg.make_kl_controller("no_such_kind", 0.1)


@pytest.mark.parametrize("kl_name", ["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"])
def test_kl_reward_penalty(kl_name):
    rng = np.random.default_rng(300)
    N, L = 5, 8
    m = right_padded(rng, N, L, min_len=1)
    lp, rf = rng.normal(-2, 0.7, (N, L)), rng.normal(-2, 0.7, (N, L))
    lp[0, 0], rf[0, 0] = -40.0, -1.0  # ref - logp = 39: k3 is clipped at both stages
    m[0, 0] = 1.0
    lp[m == 0] = 30.0  # junk on padding
    scores = rng.normal(size=N)
    ctrl = alg.AdaptiveKLController(0.07, target=0.3, horizon=50)
    rewards, kl, metrics = alg.kl_reward_penalty(scores, lp, rf, m, ctrl, kl_name)
    want_kl = np.zeros((N, L))
    want_r = np.zeros((N, L))
    row_means = []
    for b in range(N):
        valid = [t for t in range(L) if m[b, t]]
        for t in valid:
            want_kl[b, t] = ref_kl_token(lp[b, t], rf[b, t], kl_name)
            want_r[b, t] = -0.07 * want_kl[b, t]
        want_r[b, valid[-1]] += scores[b]
        row_means.append(sum(want_kl[b, t] for t in valid) / len(valid))
    current = sum(row_means) / N
    assert rewards.dtype == np.float32 and kl.dtype == np.float64
    np.testing.assert_allclose(kl, want_kl, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(rewards, want_r, rtol=1e-5, atol=1e-6)
    assert metrics["actor/reward_kl_penalty"] == pytest.approx(current, rel=1e-6)
    assert metrics["actor/reward_kl_penalty_coeff"] == 0.07
    assert ctrl.value == pytest.approx(ref_adaptive(0.07, 0.3, 50, [current], [N]), rel=1e-9)
    assert ctrl.value != 0.07
    fixed = alg.FixedKLController(0.07)
    r2, _, _ = alg.kl_reward_penalty(scores, lp, rf, m, fixed, kl_name)
    np.testing.assert_array_equal(r2, rewards)
    assert fixed.value == 0.07


# ---------------------------------------------------------------------------------------------
# GSPO


def gspo_case(seed=400):
    """Rows: 0 clipped (s>1+hi, A>0), 1 all padding, 2 unclipped (s<1-lo, A>0), 3 unclipped (s>1+hi, A<0),
    4 clipped (s<1-lo, A<0), 5 inside the clip range. Advantages are constant per row, as GRPO gives."""
    rng = np.random.default_rng(seed)
    B, L = 6, 7
    m = right_padded(rng, B, L, min_len=2)
    m[1] = 0.0
    m[0, -1] = 0.0  # make sure of a padded tail
    old = rng.normal(-1.5, 0.5, (B, L))
    target_mean = [0.3, 0.0, -0.3, 0.3, -0.3, 0.01]
    noise = rng.normal(0, 0.2, (B, L))
    lp = np.zeros((B, L))
    for b in range(B):
        valid = [t for t in range(L) if m[b, t]]
        centre = sum(noise[b, t] for t in valid) / max(len(valid), 1)
        for t in range(L):
            lp[b, t] = old[b, t] + noise[b, t] - centre + target_mean[b] if m[b, t] else 4.0  # junk on padding
    A = np.repeat(np.array([1.3, 0.7, 0.8, -1.1, -0.6, 0.9])[:, None], L, axis=1)
    return lp, old, A, m


def test_gspo_loss_metrics_and_gradient():
    lo, hi = 0.05, 0.06
    lp, old, A, m = gspo_case()
    fn = losses.gspo_policy_loss
    assert losses.get_policy_loss("gspo") is fn
    pg, cf, kl = fn(T(lp), T(old), T(A), T(m), lo, hi)
    want_pg, want_cf, want_kl, want_g = ref_gspo(lp, old, A, m, lo, hi)
    assert float(pg.asnumpy()) == pytest.approx(want_pg, rel=1e-5, abs=1e-6)
    assert float(cf.asnumpy()) == pytest.approx(want_cf, abs=1e-6)
    assert 0.0 < want_cf < 1.0  # some rows clipped, some not
    assert float(kl.asnumpy()) == pytest.approx(want_kl, rel=1e-5, abs=1e-6)
    g = ms.grad(lambda x: fn(x, T(old), T(A), T(m), lo, hi)[0])(T(lp)).asnumpy()
    np.testing.assert_allclose(g, want_g, rtol=1e-5, atol=1e-7)
    assert np.all(g[0] == 0.0) and np.all(g[4] == 0.0) and np.all(g[1] == 0.0)  # clipped rows, padding row
    assert np.all(g[m == 0] == 0.0) and np.all(np.abs(g[2][m[2] > 0]) > 1e-3)
    # the analytic sequence-level gradient is the derivative of the reference loss (finite differences)
    fd = np.zeros_like(lp)
    for idx in np.ndindex(lp.shape):
        e = np.zeros_like(lp)
        e[idx] = 1e-6
        fd[idx] = (ref_gspo(lp + e, old, A, m, lo, hi)[0] - ref_gspo(lp - e, old, A, m, lo, hi)[0]) / 2e-6
    np.testing.assert_allclose(fd, want_g, rtol=1e-6, atol=1e-9)
    with pytest.raises(ValueError, match="clip_ratio_c"):
        fn(T(lp), T(old), T(A), T(m), lo, hi, 3.0)


def test_gspo_paper_clip_range():
    lp, old, A, m = gspo_case(seed=401)
    pg, cf, _ = losses.gspo_policy_loss(T(lp), T(old), T(A), T(m))  # defaults: 3e-4 / 4e-4
    want_pg, want_cf, _, _ = ref_gspo(lp, old, A, m, 3e-4, 4e-4)
    assert float(pg.asnumpy()) == pytest.approx(want_pg, rel=1e-5, abs=1e-6)
    assert float(cf.asnumpy()) == pytest.approx(want_cf, abs=1e-6)


def test_actor_loss_gspo():
    with pytest.raises(ValueError, match="clip_ratio_c"):
        losses.ActorLoss(0.05, 0.06, 3.0, "seq-mean-token-mean", policy_loss_name="gspo")
    lo, hi = 0.05, 0.06
    lp, old, A, m = gspo_case(seed=402)
    actor = losses.ActorLoss(lo, hi, None, "seq-mean-token-mean", policy_loss_name="gspo")
    loss, pg, cf, ppo_kl, kl_loss, ent = (float(o.asnumpy()) for o in actor(T(lp), T(old), T(A), T(m)))
    want_pg, want_cf, want_kl, _ = ref_gspo(lp, old, A, m, lo, hi)
    direct = float(losses.gspo_policy_loss(T(lp), T(old), T(A), T(m), lo, hi)[0].asnumpy())
    assert loss == pg == pytest.approx(direct, rel=1e-6)
    assert pg == pytest.approx(want_pg, rel=1e-5, abs=1e-6)
    assert cf == pytest.approx(want_cf, abs=1e-6) and ppo_kl == pytest.approx(want_kl, rel=1e-5, abs=1e-6)
    assert kl_loss == 0.0 and ent == 0.0
