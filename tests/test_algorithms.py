"""mindrl.algorithms against independent float64 numpy references written here (loops on purpose,
so they do not share structure with the vectorised code under test)."""
import math

import numpy as np
import pytest

import mindrl.algorithms as alg


pytestmark = pytest.mark.usefixtures("pynative_mode")  # ms.grad on Python lambdas needs PyNative
from mindrl.algorithms.denominators import loss_denominator

ms = pytest.importorskip("mindspore")
from mindspore import Tensor, nn, ops  # noqa: E402

from mindrl.algorithms import kl as kl_mod  # noqa: E402
from mindrl.algorithms import losses  # noqa: E402

MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]


def T(x):
    return Tensor(np.asarray(x, np.float32))


def npf(t):
    return t.asnumpy().astype(np.float64)


# ---------------------------------------------------------------------------------------------
# float64 references


def ref_grpo(scores, ids, norm=True, eps=1e-6):
    out = np.zeros(len(scores))
    for g in set(ids):
        idx = [i for i in range(len(scores)) if ids[i] == g]
        vals = [float(scores[i]) for i in idx]
        if len(vals) < 2 or max(vals) == min(vals):
            continue
        mu = sum(vals) / len(vals)
        sd = math.sqrt(sum((v - mu) ** 2 for v in vals) / (len(vals) - 1))
        for i in idx:
            out[i] = (scores[i] - mu) / (sd + eps) if norm else scores[i] - mu
    return out


def ref_whiten(x, m, eps=1e-8):
    vals = [x[i, j] for i in range(x.shape[0]) for j in range(x.shape[1]) if m[i, j]]
    mu = sum(vals) / len(vals)
    var = sum((v - mu) ** 2 for v in vals) / (len(vals) - 1)
    return np.where(m > 0, (x - mu) / math.sqrt(var + eps), 0.0)


def ref_gae(r, v, m, gamma, lam):
    n, t = r.shape
    adv = np.zeros((n, t))
    for b in range(n):
        pos = [j for j in range(t) if m[b, j]]
        nxt_v, nxt_a = 0.0, 0.0
        for j in reversed(pos):
            a = r[b, j] + gamma * nxt_v - v[b, j] + gamma * lam * nxt_a
            adv[b, j] = a
            nxt_v, nxt_a = v[b, j], a
    ret = np.where(m > 0, adv + v, 0.0)
    return adv, ret


def ref_agg(lm, m, mode, denom=None, norm_len=None):
    B, L = lm.shape
    seq_vals, tok_total, tok_count, nonempty = [], 0.0, 0.0, 0
    for b in range(B):
        s = sum(lm[b, j] for j in range(L) if m[b, j])
        n = sum(1 for j in range(L) if m[b, j])
        tok_total += s
        tok_count += n
        if n:
            nonempty += 1
            if mode == "seq-mean-token-mean":
                seq_vals.append(s / n)
            elif mode == "seq-mean-token-sum":
                seq_vals.append(s)
            else:
                seq_vals.append(s / (norm_len or L))
    if mode == "token-mean":
        d = denom if denom is not None else max(tok_count, 1)
        return tok_total / d
    d = denom if denom is not None else max(nonempty, 1)
    return sum(seq_vals) / d


def ref_pg_tokens(logp, old, A, lo, hi, c=None):
    out = np.zeros_like(logp)
    clipped = np.zeros_like(logp)
    for idx in np.ndindex(logp.shape):
        lr = min(max(logp[idx] - old[idx], -20.0), 20.0)
        ratio = math.exp(lr)
        s1 = -A[idx] * ratio
        s2 = -A[idx] * min(max(ratio, 1 - lo), 1 + hi)
        val = max(s1, s2)
        clipped[idx] = 1.0 if s2 > s1 else 0.0
        if c is not None and A[idx] < 0:
            val = min(val, -A[idx] * c)
        out[idx] = val
    return out, clipped


def ref_masked_mean(x, m):
    return (x * m).sum() / max(m.sum(), 1)


def ref_kl(logp, ref, name):
    d = logp - ref
    if name in ("k1", "kl"):
        return d
    if name in ("k2", "mse"):
        return 0.5 * d**2
    if name == "abs":
        return np.abs(d)
    x = np.clip(-d, -20, 20)
    return np.clip(np.exp(x) - x - 1, -10, 10)


def random_mask(rng, B, L):
    lengths = rng.integers(1, L + 1, size=B)
    m = (np.arange(L)[None, :] < lengths[:, None]).astype(np.float64)
    m[1] = 0.0  # an all-masked row
    return m


@pytest.fixture
def graph_mode():
    prev = ms.get_context("mode")
    ms.set_context(mode=ms.GRAPH_MODE)
    yield
    ms.set_context(mode=prev)


# ---------------------------------------------------------------------------------------------
# numpy side


def test_grpo_contiguous_groups_and_edge_cases():
    rng = np.random.default_rng(0)
    scores = rng.random(24)
    scores[8:12] = 0.7  # a group with identical rewards
    ids = [i // 4 for i in range(24)]
    got = alg.grpo_advantages(scores, 4)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, ref_grpo(scores, ids), rtol=1e-5, atol=1e-6)
    assert np.all(got[8:12] == 0.0)
    np.testing.assert_allclose(
        alg.grpo_advantages(scores, 4, norm_adv_by_std=False), ref_grpo(scores, ids, norm=False), atol=1e-6
    )
    np.testing.assert_allclose(alg.dr_grpo_advantages(scores, 4), ref_grpo(scores, ids, norm=False), atol=1e-6)


def test_grpo_explicit_index_unordered_and_singleton():
    rng = np.random.default_rng(1)
    ids = ["p3", "p1", "p3", "p2", "p1", "p3", "p9", "p2"]  # p9 is a singleton
    scores = rng.integers(0, 2, size=8).astype(float)
    scores[[1, 4]] = [1.0, 0.0]  # p1 has variance
    got = alg.grpo_advantages(scores, ids, eps=1e-3)
    np.testing.assert_allclose(got, ref_grpo(scores, ids, eps=1e-3), rtol=1e-5, atol=1e-6)
    assert got[6] == 0.0
    # hand-computed: p1 = {1, 0}: mean .5, unbiased std sqrt(.5)
    assert got[1] == pytest.approx(0.5 / (math.sqrt(0.5) + 1e-3), rel=1e-6)


def test_grpo_bad_group_size():
    with pytest.raises(ValueError, match="n_samples_per_prompt"):
        alg.grpo_advantages(np.zeros(10), 4)


def test_broadcast_to_tokens():
    m = np.array([[1, 1, 0], [0, 0, 0], [1, 1, 1]], float)
    got = alg.broadcast_to_tokens([2.0, -1.0, 0.5], m)
    np.testing.assert_array_equal(got, [[2, 2, 0], [0, 0, 0], [0.5, 0.5, 0.5]])


def test_gae_matches_reference_with_holes():
    rng = np.random.default_rng(2)
    B, L = 5, 9
    m = random_mask(rng, B, L)
    m[3, 2] = 0.0  # a hole in the middle (e.g. an observation token)
    r, v = rng.normal(size=(B, L)), rng.normal(size=(B, L))
    for gamma, lam in [(1.0, 1.0), (0.99, 0.95), (0.9, 0.0)]:
        adv, ret = alg.gae_advantages(r, v, m, gamma, lam, whiten=False)
        radv, rret = ref_gae(r, v, m, gamma, lam)
        np.testing.assert_allclose(adv, radv, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(ret, rret, rtol=1e-5, atol=1e-5)
        wadv, wret = alg.gae_advantages(r, v, m, gamma, lam, whiten=True)
        np.testing.assert_allclose(wadv, ref_whiten(radv, m), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(wret, rret, rtol=1e-5, atol=1e-5)



class _GaeCell(nn.Cell):
    def __init__(self, gamma, lam, block=None):
        super().__init__()
        self.gamma, self.lam, self.block = gamma, lam, block

    def construct(self, r, v, m):
        return losses.gae_returns(r, v, m, self.gamma, self.lam, self.block)


@pytest.mark.parametrize("mode, width, block", [("pynative", 11, None), ("graph", 11, None), ("graph", 11, 3),
                                                ("graph", 12, 4), ("pynative", 300, None)])
def test_gae_in_the_graph_matches_reference_on_response_masks(mode, width, block, request):
    """The critic's update computes returns in its graph (trainer/critic_graphs.py CriticValuesLossCell): on masks
    that are a response's tokens then padding (an all-masked row too) they are the float64 loop's, in one block of
    positions or several (11 in blocks of 3: the last one padded; 300 in blocks of 18, the default past 256)."""
    if mode == "graph":
        request.getfixturevalue("graph_mode")
    rng = np.random.default_rng(21)
    B, L = 6, width
    m = random_mask(rng, B, L)
    m[0] = 1.0  # a response that fills the width
    r, v = rng.normal(size=(B, L)), rng.normal(size=(B, L))
    for gamma, lam in [(1.0, 1.0), (0.99, 0.95), (0.9, 0.0), (1.0, 0.95)]:
        adv, ret = _GaeCell(gamma, lam, block)(T(r), T(v), T(m))
        radv, rret = ref_gae(r, v, m, gamma, lam)
        np.testing.assert_allclose(npf(adv), radv, rtol=1e-5, atol=2e-5)
        np.testing.assert_allclose(npf(ret), rret, rtol=1e-5, atol=2e-5)

def test_gae_hand_example():
    # gamma = lam = 1: A_t = (sum of rewards from t on) - V_t
    r = np.array([[0.0, 0.0, 1.0, 0.0]])
    v = np.array([[0.5, 0.25, 0.75, 9.0]])
    m = np.array([[1, 1, 1, 0]], float)
    adv, ret = alg.gae_advantages(r, v, m, 1.0, 1.0, whiten=False)
    np.testing.assert_allclose(adv, [[0.5, 0.75, 0.25, 0.0]], atol=1e-7)
    np.testing.assert_allclose(ret, [[1.0, 1.0, 1.0, 0.0]], atol=1e-7)


def test_kl_penalized_token_rewards():
    rng = np.random.default_rng(3)
    m = random_mask(rng, 4, 6)
    m[2, 4] = 0.0
    m[2, 5] = 1.0  # last valid token after a hole
    kl = rng.normal(size=(4, 6))
    scores = np.array([1.0, 5.0, -2.0, 0.5])
    got = alg.kl_penalized_token_rewards(scores, kl, m, 0.1)
    want = -0.1 * kl * m
    for b in range(4):
        valid = [j for j in range(6) if m[b, j]]
        if valid:
            want[b, valid[-1]] += scores[b]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert np.all(got[1] == 0.0)


def test_kl_penalty_np():
    rng = np.random.default_rng(4)
    lp, rf = rng.normal(size=(3, 5)), rng.normal(size=(3, 5))
    lp[0, 0], rf[0, 0] = -40.0, 0.0  # extreme: clamp
    for name in ["k1", "kl", "k2", "mse", "k3", "low_var_kl", "abs"]:
        np.testing.assert_allclose(alg.kl_penalty_np(lp, rf, name), ref_kl(lp, rf, name), rtol=1e-5, atol=1e-6)


def test_masked_whiten_np():
    rng = np.random.default_rng(5)
    x, m = rng.normal(size=(4, 7)), random_mask(rng, 4, 7)
    np.testing.assert_allclose(alg.masked_whiten_np(x, m), ref_whiten(x, m), rtol=1e-5, atol=1e-6)


def test_dynamic_sampling_keep_mask():
    scores = [1, 1, 1, 0, 1, 0, 0, 0, 0, 0.5, 0.5, 0.5001]
    keep = alg.dynamic_sampling_keep_mask(scores, 3)
    assert keep.tolist() == [False] * 3 + [True] * 3 + [False] * 3 + [True] * 3
    keep = alg.dynamic_sampling_keep_mask([1, 0, 1, 1], ["a", "b", "a", "b"])
    assert keep.tolist() == [False, True, False, True]


def test_overlong_penalty():
    # max 100, buffer 20: zero up to 80, then linear to -1.0 at 100
    got = alg.overlong_penalty([10, 80, 81, 90, 100, 130], 100, 20, 1.0)
    np.testing.assert_allclose(got, [0, 0, -0.05, -0.5, -1.0, -1.0], atol=1e-7)
    np.testing.assert_allclose(alg.overlong_penalty([90], 100, 20, 2.0), [-1.0])
    assert np.all(alg.overlong_penalty([100, 5], 100, 0, 1.0) == 0)


def test_loss_denominator():
    m = np.array([[1, 1, 0], [0, 0, 0], [1, 0, 0]])
    assert loss_denominator(m, "token-mean") == 3.0
    for mode in MODES[1:]:
        assert loss_denominator(m, mode) == 2.0
    assert loss_denominator(np.zeros((2, 3)), "token-mean") == 1.0
    with pytest.raises(ValueError, match="token-mean"):
        loss_denominator(m, "mean")


def test_registries():
    assert alg.get_advantage_estimator("grpo").name == "grpo"
    assert alg.get_advantage_estimator("gae").needs_critic
    assert not alg.get_advantage_estimator("dr_grpo").needs_critic
    with pytest.raises(ValueError, match="dr_grpo.*gae.*grpo"):
        alg.get_advantage_estimator("ppo")
    for a, b in [("k1", "kl"), ("k2", "mse"), ("k3", "low_var_kl")]:
        assert kl_mod.get_kl_estimator(a) is kl_mod.get_kl_estimator(b)
    with pytest.raises(ValueError, match="low_var_kl"):
        kl_mod.get_kl_estimator("k4")
    assert losses.get_policy_loss("vanilla") is losses.policy_loss
    assert losses.get_policy_loss("gspo") is losses.gspo_policy_loss
    with pytest.raises(ValueError, match="vanilla"):
        losses.get_policy_loss("cispo")


def test_numpy_modules_do_not_import_mindspore():
    import subprocess
    import sys

    code = "import sys, mindrl.algorithms as a; a.grpo_advantages([1, 0], 2); print('mindspore' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------------------------------------
# MindSpore side, PyNative numerics


def test_agg_loss_every_mode():
    rng = np.random.default_rng(6)
    lm, m = rng.normal(size=(5, 8)), random_mask(rng, 5, 8)
    for mode in MODES:
        got = float(losses.agg_loss(T(lm), T(m), mode).asnumpy())
        assert got == pytest.approx(ref_agg(lm, m, mode), rel=1e-5, abs=1e-6), mode
    got = float(losses.agg_loss(T(lm), T(m), "seq-mean-token-sum-norm", norm_len=32).asnumpy())
    assert got == pytest.approx(ref_agg(lm, m, "seq-mean-token-sum-norm", norm_len=32), rel=1e-5)
    with pytest.raises(ValueError, match="seq-mean-token-mean"):
        losses.agg_loss(T(lm), T(m), "sum")


def test_agg_loss_all_masked_is_zero_not_nan():
    lm = np.ones((3, 4))
    for mode in MODES:
        got = float(losses.agg_loss(T(lm), T(np.zeros((3, 4))), mode).asnumpy())
        assert got == 0.0, mode


@pytest.mark.parametrize("mode", MODES)
def test_micro_batch_accumulation_equals_full_batch(mode):
    rng = np.random.default_rng(7)
    B, L = 7, 6
    lp, old = rng.normal(-1, 0.3, (B, L)), rng.normal(-1, 0.3, (B, L))
    A, m = rng.normal(size=(B, L)), random_mask(rng, B, L)
    # the denominator, counted independently of loss_denominator()
    denom = m.sum() if mode == "token-mean" else float((m.sum(1) > 0).sum())
    assert loss_denominator(m, mode) == denom
    full = float(losses.policy_loss(T(lp), T(old), T(A), T(m), 0.2, 0.28, 3.0, mode)[0].asnumpy())
    grad_fn = ms.grad(lambda x, o, a, mk, d: losses.policy_loss(x, o, a, mk, 0.2, 0.28, 3.0, mode, d)[0])
    full_grad = grad_fn(T(lp), T(old), T(A), T(m), None).asnumpy()
    parts, part_grads = 0.0, []
    for sl in [slice(0, 3), slice(3, 4), slice(4, 7)]:
        d = Tensor(np.float32(denom))
        args = (T(lp[sl]), T(old[sl]), T(A[sl]), T(m[sl]))
        parts += float(losses.policy_loss(*args, 0.2, 0.28, 3.0, mode, d)[0].asnumpy())
        part_grads.append(grad_fn(*args, d).asnumpy())
    assert parts == pytest.approx(full, rel=1e-5, abs=1e-6)
    np.testing.assert_allclose(np.concatenate(part_grads), full_grad, rtol=1e-5, atol=1e-7)
    # and both equal the float64 reference
    tok, _ = ref_pg_tokens(lp, old, A, 0.2, 0.28, 3.0)
    assert full == pytest.approx(ref_agg(tok, m, mode), rel=1e-5, abs=1e-6)


def test_policy_loss_against_reference_with_extremes():
    rng = np.random.default_rng(8)
    B, L = 6, 10
    old = rng.normal(-2, 0.5, (B, L))
    lp = old + rng.normal(0, 0.4, (B, L))
    lp[0, 0], lp[0, 1] = old[0, 0] + 60.0, old[0, 1] - 60.0  # extreme log-ratios: clamped at +-20
    A = rng.normal(size=(B, L))
    A[0, 0] = -1.5  # dual-clip must catch exp(20) * 1.5
    A[2, :] = -np.abs(A[2, :])
    lp[2, :] = old[2, :] + 1.5  # ratio 4.5 > clip_ratio_c with negative advantages
    m = random_mask(rng, B, L)
    m[0, :2] = 1.0
    m[2, :] = 1.0
    for lo, hi, c in [(0.2, 0.2, None), (0.2, 0.28, None), (0.2, 0.28, 3.0)]:
        for mode in MODES:
            pg, cf, kl = losses.policy_loss(T(lp), T(old), T(A), T(m), lo, hi, c, mode)
            tok, clipped = ref_pg_tokens(lp, old, A, lo, hi, c)
            assert float(pg.asnumpy()) == pytest.approx(ref_agg(tok, m, mode), rel=1e-5, abs=1e-5), (lo, hi, c, mode)
            assert float(cf.asnumpy()) == pytest.approx(ref_masked_mean(clipped, m), abs=1e-6)
            want_kl = ref_masked_mean(-np.clip(lp - old, -20, 20), m)
            assert float(kl.asnumpy()) == pytest.approx(want_kl, rel=1e-5, abs=1e-6)
    # dual-clip really bounds: token (2, j) with A<0 and ratio 4.5 -> loss -A*3
    tok, _ = ref_pg_tokens(lp, old, A, 0.2, 0.28, 3.0)
    np.testing.assert_allclose(tok[2], -A[2] * 3.0)
    with pytest.raises(ValueError, match="clip_ratio_c"):
        losses.policy_loss(T(lp), T(old), T(A), T(m), 0.2, 0.2, 0.5)


def test_kl_estimators_against_reference():
    rng = np.random.default_rng(9)
    lp, rf = rng.normal(-2, 1, (4, 6)), rng.normal(-2, 1, (4, 6))
    lp[0, 0], rf[0, 0] = -50.0, -1.0  # exp(49) would overflow float32 without the clamp
    lp[0, 1], rf[0, 1] = -1.0, -50.0
    for name in ["k1", "kl", "k2", "mse", "k3", "low_var_kl", "abs"]:
        got = npf(kl_mod.get_kl_estimator(name)(T(lp), T(rf)))
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, ref_kl(lp, rf, name), rtol=1e-5, atol=1e-5, err_msg=name)


def test_kl_gradients_finite_at_extremes():
    lp = np.array([[-100.0, -1.0, -2.0, -0.5]])  # ref - logp = 100: exp() overflows float32 unclamped
    rf = np.array([[0.0, -50.0, -2.3, -0.4]])
    d = lp - rf
    want = {
        "k1": np.ones_like(d),
        "k2": d,
        "abs": np.sign(d),
        # k3 = exp(-d) + d - 1: derivative 1 - exp(-d) where nothing is clamped, else 0
        "k3": np.where((np.abs(d) < 20) & (np.abs(np.exp(-d) + d - 1) < 10), 1 - np.exp(-d), 0.0),
    }
    for name, w in want.items():
        fn = kl_mod.get_kl_estimator(name)
        g = ms.grad(lambda x: fn(x, T(rf)).sum())(T(lp)).asnumpy()
        assert np.all(np.isfinite(g)), name
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=name)


def entropy(logits):
    """The entropy the actor's loss reads: TokenStats', beside each token's log-prob (models/scoring.py)."""
    from mindrl.models.scoring import TokenStats
    targets = ms.Tensor(np.zeros(logits.shape[:-1], np.int32))
    return TokenStats()(logits, targets)[1]


def test_entropy_is_stable():
    rng = np.random.default_rng(10)
    z = rng.normal(0, 3, (2, 3, 11))
    z[0, 0] += 1e4  # a huge shift must not overflow
    z[1, 2, 4] = 60.0  # nearly one-hot
    got = npf(entropy(T(z)))
    want = np.zeros((2, 3))
    for idx in np.ndindex(2, 3):
        v = z[idx] - z[idx].max()
        p = np.exp(v) / np.exp(v).sum()
        want[idx] = -sum(pi * math.log(pi) for pi in p if pi > 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-4)


def test_log_prob_is_stable():
    from mindrl.models.scoring import TokenStats
    rng = np.random.default_rng(12)
    z = rng.normal(0, 3, (2, 3, 11))
    z[0] += 1e4  # log p is a small number left from logits near 1e4
    z = z.astype(np.float32).astype(np.float64)  # the reference sees the float32 logits the cell sees
    targets = rng.integers(0, 11, (2, 3))
    got = npf(TokenStats()(T(z), Tensor(targets.astype(np.int32)))[0])
    v = z - z.max(-1, keepdims=True)
    want = np.take_along_axis(v - np.log(np.exp(v).sum(-1, keepdims=True)), targets[..., None], -1)[..., 0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5)


def test_value_loss_against_reference():
    rng = np.random.default_rng(11)
    B, L = 4, 7
    v, ov, R = rng.normal(size=(B, L)), rng.normal(size=(B, L)), rng.normal(size=(B, L))
    m = random_mask(rng, B, L)
    for mode in ["token-mean", "seq-mean-token-mean"]:
        vf, cf = losses.value_loss(T(v), T(ov), T(R), T(m), 0.2, mode)
        tok, cl = np.zeros((B, L)), np.zeros((B, L))
        for idx in np.ndindex(B, L):
            vc = ov[idx] + min(max(v[idx] - ov[idx], -0.2), 0.2)
            e1, e2 = (v[idx] - R[idx]) ** 2, (vc - R[idx]) ** 2
            tok[idx], cl[idx] = max(e1, e2), float(e2 > e1)
        assert float(vf.asnumpy()) == pytest.approx(0.5 * ref_agg(tok, m, mode), rel=1e-5)
        assert float(cf.asnumpy()) == pytest.approx(ref_masked_mean(cl, m), abs=1e-6)


def test_value_loss_counts_no_clip_inside_the_range():
    """Values within cliprange_value of the old ones are not clipped, even where float32's old + (v - old) misses v
    by a rounding step (such tokens exist in this draw: the test fails if the rounding is counted as a clip)."""
    rng = np.random.default_rng(0)
    v = (rng.normal(size=(8, 125)) * 3).astype(np.float32)
    ov = (v + rng.uniform(-0.4, 0.4, size=v.shape)).astype(np.float32)
    R = rng.normal(size=v.shape).astype(np.float32)
    rounded = ov + np.clip(v - ov, np.float32(-0.5), np.float32(0.5))
    assert ((rounded - R) ** 2 > (v - R) ** 2).any(), "no token where the rounding would look like a clip"
    vf, cf = losses.value_loss(T(v), T(ov), T(R), T(np.ones(v.shape, np.float32)), 0.5, "token-mean")
    assert float(cf.asnumpy()) == 0.0
    assert float(vf.asnumpy()) == pytest.approx(0.5 * np.mean((v.astype(np.float64) - R) ** 2), rel=1e-6)


def test_masked_helpers_ms():
    rng = np.random.default_rng(12)
    x, m = rng.normal(size=(4, 7)), random_mask(rng, 4, 7)
    assert float(losses.masked_mean(T(x), T(m)).asnumpy()) == pytest.approx(ref_masked_mean(x, m), rel=1e-5)
    row = npf(losses.masked_mean(T(x), T(m), axis=-1))
    assert row[1] == 0.0  # all-masked row: 0, not NaN


# ---------------------------------------------------------------------------------------------
# GRAPH_MODE: inside a Cell, with gradients against float64 finite differences


class PGCell(nn.Cell):
    def __init__(self, lo, hi, c, mode):
        super().__init__()
        self.lo, self.hi, self.c, self.mode = lo, hi, c, mode

    def construct(self, logp, old, adv, mask, denom):
        return losses.policy_loss(logp, old, adv, mask, self.lo, self.hi, self.c, self.mode, denom)


def _away_from_kinks(rng, B, L, lo, hi, c):
    """log-ratios whose ratio is not within 1e-2 of a clip boundary, so finite differences are valid."""
    lr = rng.normal(0, 0.4, (B, L))
    for bound in (1 - lo, 1 + hi, c):
        near = np.abs(np.exp(lr) - bound) < 1e-2
        lr[near] += 0.05
    return lr


def test_policy_loss_graph_mode_gradient(graph_mode):
    rng = np.random.default_rng(13)
    B, L = 4, 6
    lo, hi, c, mode = 0.2, 0.28, 3.0, "seq-mean-token-mean"
    old = rng.normal(-1.5, 0.5, (B, L))
    lp = old + _away_from_kinks(rng, B, L, lo, hi, c)
    lp[0, 0] = old[0, 0] + 1.6  # ratio ~5 with A < 0: dual-clipped, zero gradient
    A = rng.normal(size=(B, L))
    A[0, 0] = -1.0
    m = random_mask(rng, B, L)
    m[0, 0] = 1.0
    denom = 5.0
    cell = PGCell(lo, hi, c, mode)
    grad_fn = ms.value_and_grad(cell, grad_position=0, has_aux=True)
    (pg, cf, kl), g = grad_fn(T(lp), T(old), T(A), T(m), Tensor(np.float32(denom)))

    def f(x):
        tok, _ = ref_pg_tokens(x, old, A, lo, hi, c)
        return ref_agg(tok, m, mode, denom=denom)

    assert float(pg.asnumpy()) == pytest.approx(f(lp), rel=1e-5)
    h, fd = 1e-6, np.zeros_like(lp)
    for idx in np.ndindex(B, L):
        e = np.zeros_like(lp)
        e[idx] = h
        fd[idx] = (f(lp + e) - f(lp - e)) / (2 * h)
    np.testing.assert_allclose(g.asnumpy(), fd, rtol=1e-4, atol=1e-6)
    assert g.asnumpy()[0, 0] == 0.0 and g.asnumpy()[1].max() == 0.0  # clipped token, masked row
    assert np.abs(fd).max() > 0.01  # the check is not vacuous


class AggCell(nn.Cell):
    def __init__(self, mode):
        super().__init__()
        self.mode = mode

    def construct(self, x, m):
        return losses.agg_loss(x, m, self.mode), losses.agg_loss(x, m, self.mode, 4.0)


def test_agg_loss_graph_mode_every_mode(graph_mode):
    rng = np.random.default_rng(14)
    lm, m = rng.normal(size=(4, 5)), random_mask(rng, 4, 5)
    for mode in MODES:
        a, b = AggCell(mode)(T(lm), T(m))
        assert float(a.asnumpy()) == pytest.approx(ref_agg(lm, m, mode), rel=1e-5, abs=1e-6), mode
        assert float(b.asnumpy()) == pytest.approx(ref_agg(lm, m, mode, denom=4.0), rel=1e-5, abs=1e-6), mode


def test_actor_loss_graph_mode(graph_mode):
    rng = np.random.default_rng(15)
    B, L, V = 3, 5, 7
    old = rng.normal(-1.5, 0.5, (B, L))
    lp = old + _away_from_kinks(rng, B, L, 0.2, 0.2, 10.0)
    ref = lp + rng.normal(0, 0.3, (B, L))
    A, m = rng.normal(size=(B, L)), random_mask(rng, B, L)
    logits = rng.normal(size=(B, L, V))

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.loss = losses.ActorLoss(0.2, 0.2, None, "token-mean", True, "k3", 0.1, 0.01)
            from mindrl.models.scoring import TokenStats
            self.stats = TokenStats()

        def construct(self, logp, old, adv, mask, ref, logits):
            return self.loss(logp, old, adv, mask, ref, self.stats(logits, ops.zeros(mask.shape, ms.int32))[1])

    out, g = ms.value_and_grad(Net(), grad_position=0, has_aux=True)(T(lp), T(old), T(A), T(m), T(ref), T(logits))
    loss, pg, cf, ppo_kl, kl_loss, ent = (float(o.asnumpy()) for o in out)
    ent_ref = np.zeros((B, L))
    for idx in np.ndindex(B, L):
        p = np.exp(logits[idx]) / np.exp(logits[idx]).sum()
        ent_ref[idx] = -(p * np.log(p)).sum()

    def f(x):
        tok, _ = ref_pg_tokens(x, old, A, 0.2, 0.2)
        return ref_agg(tok, m, "token-mean") + 0.1 * ref_agg(ref_kl(x, ref, "k3"), m, "token-mean")

    want_ent = ref_agg(ent_ref, m, "token-mean")
    assert pg == pytest.approx(ref_agg(ref_pg_tokens(lp, old, A, 0.2, 0.2)[0], m, "token-mean"), rel=1e-5)
    assert kl_loss == pytest.approx(ref_agg(ref_kl(lp, ref, "k3"), m, "token-mean"), rel=1e-5)
    assert ent == pytest.approx(want_ent, rel=1e-5)
    assert loss == pytest.approx(f(lp) - 0.01 * want_ent, rel=1e-5)
    fd = np.zeros_like(lp)
    for idx in np.ndindex(B, L):
        e = np.zeros_like(lp)
        e[idx] = 1e-6
        fd[idx] = (f(lp + e) - f(lp - e)) / 2e-6
    np.testing.assert_allclose(g.asnumpy(), fd, rtol=1e-4, atol=1e-6)


def test_actor_loss_rejects_bad_config():
    with pytest.raises(ValueError, match="loss_agg_mode"):
        losses.ActorLoss(loss_agg_mode="mean")
    with pytest.raises(ValueError, match="kl_penalty"):
        losses.ActorLoss(kl_penalty="k9")
    with pytest.raises(ValueError, match="clip_ratio_c"):
        losses.ActorLoss(clip_ratio_c=1.0)


def test_entropy_gradient():
    rng = np.random.default_rng(16)
    z = rng.normal(0, 2, (3, 6))
    g = ms.grad(lambda x: entropy(x).sum())(T(z)).asnumpy()
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    H = -(p * np.log(p)).sum(-1, keepdims=True)
    np.testing.assert_allclose(g, -p * (np.log(p) + H), rtol=1e-4, atol=1e-6)


class MiscCell(nn.Cell):
    def __init__(self):
        super().__init__()
        # registries are looked up at construction, never inside the graph
        self.k1, self.k2, self.ka = (kl_mod.get_kl_estimator(n) for n in ("k1", "k2", "abs"))

    def construct(self, v, ov, R, m, lp, ref):
        vf, cf = losses.value_loss(v, ov, R, m, 0.2, "seq-mean-token-sum", 3.0)
        k1, k2, ka = self.k1(lp, ref).sum(), self.k2(lp, ref).sum(), self.ka(lp, ref).sum()
        return vf, cf, k1, k2, ka


def test_value_loss_kl_graph_mode(graph_mode):
    rng = np.random.default_rng(17)
    B, L = 3, 5
    v, ov, R = rng.normal(size=(B, L)), rng.normal(size=(B, L)), rng.normal(size=(B, L))
    lp, ref = rng.normal(size=(B, L)), rng.normal(size=(B, L))
    m = random_mask(rng, B, L)
    (vf, cf, k1, k2, ka), g = ms.value_and_grad(MiscCell(), grad_position=0, has_aux=True)(
        T(v), T(ov), T(R), T(m), T(lp), T(ref)
    )

    def f(x):
        vc = ov + np.clip(x - ov, -0.2, 0.2)
        return 0.5 * ref_agg(np.maximum((x - R) ** 2, (vc - R) ** 2), m, "seq-mean-token-sum", denom=3.0)

    assert float(vf.asnumpy()) == pytest.approx(f(v), rel=1e-5)
    for got, name in [(k1, "k1"), (k2, "k2"), (ka, "abs")]:
        assert float(got.asnumpy()) == pytest.approx(ref_kl(lp, ref, name).sum(), rel=1e-5)
    fd = np.zeros_like(v)
    for idx in np.ndindex(B, L):
        e = np.zeros_like(v)
        e[idx] = 1e-6
        fd[idx] = (f(v + e) - f(v - e)) / 2e-6
    np.testing.assert_allclose(g.asnumpy(), fd, rtol=1e-4, atol=1e-6)


def test_actor_loss_dr_grpo_divides_by_constant_length_not_padded_width():
    """seq-mean-token-sum-norm: sum over tokens / max response length, whatever the padded width."""
    import mindspore as ms
    from mindrl.algorithms.losses import ActorLoss
    rng = np.random.default_rng(3)
    b, t, max_len = 3, 5, 12
    lp = rng.normal(size=(b, t)).astype(np.float32)
    adv = rng.normal(size=(b, t)).astype(np.float32)
    mask = (rng.random((b, t)) > 0.3).astype(np.float32)
    loss = ActorLoss(loss_agg_mode="seq-mean-token-sum-norm", norm_len=max_len)
    out = loss(ms.Tensor(lp), ms.Tensor(lp), ms.Tensor(adv), ms.Tensor(mask))
    expected = (-(adv.astype(np.float64) * mask).sum(-1) / max_len).sum() / (mask.sum(-1) > 0).sum()
    assert float(out[1].asnumpy()) == pytest.approx(expected, rel=1e-5)
