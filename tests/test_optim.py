"""The optimizer step against PyTorch: AdamW (bias-corrected, decoupled decay on matrices only) after a global-norm
clip, over several steps, and an update over as many parameters as a 24-layer model has (Qwen2.5-0.5B: 290)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")


def _step_both(shapes, steps, lr, wd, clip, seed=0):
    import mindspore as ms
    from mindrl.trainer.optim import AdamW
    from mindrl.trainer.updater import ApplyGrad, GradientBuffers, GradNorm
    rng = np.random.default_rng(seed)
    init = [rng.normal(size=s).astype(np.float32) for s in shapes]
    grads = [[rng.normal(size=s).astype(np.float32) * 3 for s in shapes] for _ in range(steps)]
    params = [ms.Parameter(ms.Tensor(a.copy()), name=f"p{i}") for i, a in enumerate(init)]
    opt = AdamW(params, 0.9, 0.95, 1e-8, wd)
    accum = GradientBuffers().take(params)
    norm_cell, apply_cell = GradNorm(accum), ApplyGrad(accum, opt, clip)
    tp = [torch.nn.Parameter(torch.tensor(a, dtype=torch.float64)) for a in init]
    decayed = [p for p in tp if p.dim() >= 2]
    plain = [p for p in tp if p.dim() < 2]
    ref = torch.optim.AdamW([{"params": decayed, "weight_decay": wd}, {"params": plain, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95), eps=1e-8)
    norms = []
    for g in grads:
        for a, gi in zip(accum, g):
            a.set_data(ms.Tensor(gi))
        norm = norm_cell()
        norms.append(float(norm.asnumpy()))
        apply_cell(ms.Tensor(np.float32(lr)), norm)
        for p, gi in zip(tp, g):
            p.grad = torch.tensor(gi, dtype=torch.float64)
        want = torch.nn.utils.clip_grad_norm_(tp, clip)
        assert norms[-1] == pytest.approx(float(want), rel=1e-5)
        ref.step()
        assert all(np.abs(a.asnumpy()).max() == 0 for a in accum)  # the accumulation buffers are reset
    return params, tp, opt


def test_adamw_with_clipping_matches_pytorch_over_steps():
    shapes = [(7, 5), (5,), (3, 4, 2), (1,)]
    params, tp, opt = _step_both(shapes, steps=4, lr=1e-2, wd=0.1, clip=1.0)
    for p, t in zip(params, tp):
        np.testing.assert_allclose(p.asnumpy(), t.detach().numpy(), rtol=2e-5, atol=2e-6)
    assert float(opt.global_step.asnumpy()) == 4.0


def test_an_update_over_as_many_parameters_as_a_24_layer_model_compiles():
    """The optimizer graph's depth must not grow with the parameter count (MindSpore refuses graphs nested deeper
    than 1000 calls): 24 layers x 12 tensors + 3, as Qwen2.5-0.5B."""
    shapes = [(4, 3)] * (24 * 12) + [(3,)] * 3
    params, tp, _ = _step_both(shapes, steps=1, lr=1e-3, wd=0.0, clip=1.0, seed=1)
    for p, t in zip(params[:5] + params[-3:], tp[:5] + tp[-3:]):
        np.testing.assert_allclose(p.asnumpy(), t.detach().numpy(), rtol=2e-5, atol=2e-6)


def test_mini_batches_follow_rollout_order_without_shuffle():
    """rl_config.shuffle_minibatch: false gives the mini-batches in rollout order in every pass; true a seeded
    permutation per pass (the same seed, the same order)."""
    from types import SimpleNamespace
    from mindrl.trainer.updater import update_epochs

    class Recorder:
        metrics = (("loss", "sum"),)
        row_outputs = ()

        def __init__(self):
            self.rows = []

        def micro_step(self, arrays, denom):
            self.rows += [int(x) for x in arrays["row"][:, 0]]
            return [0.0, 0.0]

        def apply(self, lr):
            return 0.0

        def weights_finite(self, exchange):
            return True

    n = 8
    arrays = {"row": np.arange(n).reshape(n, 1), "loss_mask": np.ones((n, 3), np.float32)}
    layout = SimpleNamespace(dp=1, dp_rank=0, tp=1)
    kw = dict(epochs=2, mini_batch=4, micro_batch=2, loss_agg_mode="token-mean", layout=layout, exchange=None, lr=0.0)
    plain = Recorder()
    update_epochs(plain, arrays, arrays["loss_mask"], order_seed=None, **kw)
    assert plain.rows == list(range(n)) * 2
    shuffled, again = Recorder(), Recorder()
    update_epochs(shuffled, arrays, arrays["loss_mask"], order_seed=lambda e: 100 + e, **kw)
    update_epochs(again, arrays, arrays["loss_mask"], order_seed=lambda e: 100 + e, **kw)
    assert shuffled.rows == again.rows and shuffled.rows != plain.rows
    assert sorted(shuffled.rows[:n]) == list(range(n)) and sorted(shuffled.rows[n:]) == list(range(n))


@pytest.mark.parametrize("bad", [None, np.inf, -np.inf, np.nan, 3e38])
def test_all_finite_counts_tensors_without_inf_or_nan(bad):
    """AllFinite's count of finite tensors against numpy's isfinite, with one entry of the 600-entry tensor (not
    the first or the last) set to ``bad``: 3e38 is finite, and its square would overflow."""
    import mindspore as ms
    from mindrl.trainer.updater import AllFinite
    rng = np.random.default_rng(3)
    arrays = [rng.normal(size=s).astype(np.float32) for s in [(20, 30), (7,), (4, 3, 2)]]
    if bad is not None:
        arrays[0][11, 17] = bad
    cell = AllFinite([ms.Parameter(ms.Tensor(a), name=f"w{i}") for i, a in enumerate(arrays)])
    assert float(cell(ms.Tensor(0.0)).asnumpy()) == sum(bool(np.isfinite(a).all()) for a in arrays)


def test_gradient_buffers_are_shared_between_networks_never_within_one():
    """A second network reuses the first one's buffers of the same shape and dtype; within a network each
    parameter has a buffer of its own; a shape or dtype the first lacks gets a new zero buffer."""
    import mindspore as ms
    from mindspore import Parameter, Tensor
    from mindrl.trainer.updater import GradientBuffers

    def param(name, shape, dtype=np.float32):
        return Parameter(Tensor(np.ones(shape, dtype)), name=name)

    pool = GradientBuffers()
    first = pool.take([param("a.w1", (4, 3)), param("a.w2", (4, 3)), param("a.b", (3,))])
    assert len({id(b) for b in first}) == 3 and [b.name for b in first] == ["accum.a.w1", "accum.a.w2", "accum.a.b"]
    second = pool.take([param("c.w", (4, 3)), param("c.v", (4, 3)), param("c.u", (4, 3)), param("c.h", (3,), np.float16),
                        param("c.b", (3,))])
    assert second[0] is first[0] and second[1] is first[1] and second[4] is first[2]
    assert all(second[i] is not b for i in (2, 3) for b in first)
    assert second[2].name == "accum.c.u" and second[3].dtype == ms.float16
    for b in list(first) + list(second):
        assert not b.asnumpy().any()
