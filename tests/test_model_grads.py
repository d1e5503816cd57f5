"""The decoder's gradients against PyTorch's autograd through transformers' own models: every parameter of Qwen2
(q/k/v biases, grouped-query attention), LLaMA (tied head, llama3 rope scaling) and Qwen3 (q/k norms), on a batch
with left and right padding. The forward is checked elsewhere (test_models); this pins the backward, which mindrl
writes in places by hand (MaskedSoftmax) and shapes for memory (explicit broadcasts)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")


def _batch(rng, vocab):
    ids = rng.integers(0, vocab, size=(3, 12)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[0, :4] = 0   # left padding
    mask[2, 9:] = 0   # right padding
    # a prediction counts when both its position and its target are real tokens (padding rows are arbitrary)
    weights = rng.uniform(0.5, 1.5, size=(3, 11)).astype(np.float32) * mask[:, 1:] * mask[:, :-1]
    return ids, mask, weights


def _torch_grads(model, ids, mask, weights):
    model.zero_grad()
    pos = np.clip(np.cumsum(mask, 1) - 1, 0, None)  # what mindrl's rotary positions are: padding skipped
    out = model(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
                position_ids=torch.tensor(pos, dtype=torch.long))
    logp = torch.log_softmax(out.logits[:, :-1].double(), -1)
    picked = logp.gather(-1, torch.tensor(ids[:, 1:], dtype=torch.long)[..., None])[..., 0]
    loss = -(picked * torch.tensor(weights, dtype=torch.float64)).sum()
    loss.backward()
    return float(loss.detach()), {n: p.grad.double().numpy() for n, p in model.named_parameters()}


def _mindrl_grads(path, ids, mask, weights):
    import mindspore as ms
    from mindspore import Tensor
    from conftest import next_token_nll_cell
    from mindrl.models import from_pretrained
    from mindrl.parallel.layout import to_external, transposed_names
    lm = from_pretrained(path).net
    params = lm.trainable_params()
    step = ms.value_and_grad(next_token_nll_cell(lm), None, params)
    loss, grads = step(Tensor(ids), Tensor(mask), Tensor(ids[:, 1:].astype(np.int32)), Tensor(weights))
    trans = transposed_names(lm)
    return float(loss.asnumpy()), {p.name: to_external(g.asnumpy(), p.name in trans) for p, g in zip(params, grads)}


@pytest.mark.parametrize("arch", ["qwen2", "llama", "qwen3"])
def test_gradients_match_pytorch(hf_models, arch, rng):
    path, model = hf_models[arch]
    ids, mask, weights = _batch(rng, model.config.vocab_size)
    want_loss, want = _torch_grads(model.float(), ids, mask, weights)
    got_loss, got = _mindrl_grads(path, ids, mask, weights)
    assert got_loss == pytest.approx(want_loss, rel=1e-5)
    if model.config.tie_word_embeddings:
        want.pop("lm_head.weight", None)  # the same tensor as the embedding in torch: its gradient is in there
    assert sorted(got) == sorted(want)
    for name, g in want.items():
        scale = max(np.abs(g).max(), 1e-3)
        err = np.abs(got[name] - g).max() / scale
        assert err < 2e-4, f"{name}: max error {err:.2e} of the gradient's largest entry"


def test_token_log_probs_and_entropy_and_their_gradients_match_float64(rng):
    """models/scoring.py TokenStats (its own backward) against the formulas in float64: log p(target), the entropy,
    and the gradient of a weighted sum of both."""
    import mindspore as ms
    from mindspore import Tensor
    from mindrl.models.scoring import TokenStats
    from mindrl.runtime import setup_context
    setup_context("graph")
    z = rng.normal(0, 3, size=(2, 5, 37)).astype(np.float32)
    t = rng.integers(0, 37, size=(2, 5)).astype(np.int32)
    a = rng.normal(size=(2, 5)).astype(np.float32)
    b = rng.normal(size=(2, 5)).astype(np.float32)
    z64 = z.astype(np.float64)
    p = np.exp(z64 - z64.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    logp = np.log(p)
    want_lp = np.take_along_axis(logp, t[..., None], -1)[..., 0]
    want_ent = -(p * logp).sum(-1)
    # d/dz of sum(a * logp_t + b * H): a * (onehot - p) - b * p * (z - E_p z)
    onehot = np.eye(37)[t]
    want_grad = a[..., None] * (onehot - p) - b[..., None] * p * (z64 - (p * z64).sum(-1, keepdims=True))
    cell = TokenStats()
    lp, ent = cell(Tensor(z), Tensor(t))
    np.testing.assert_allclose(lp.asnumpy(), want_lp, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ent.asnumpy(), want_ent, rtol=1e-5, atol=1e-5)

    def objective(logits):
        lp, ent = cell(logits, Tensor(t))
        return (lp * Tensor(a)).sum() + (ent * Tensor(b)).sum()
    grad = ms.grad(objective)(Tensor(z)).asnumpy()
    np.testing.assert_allclose(grad, want_grad, rtol=1e-4, atol=1e-5)


# (hidden, heads, KV heads, rows, tokens): micro-batches of 1 to 32 rows whose attention scores, hidden states and
# logits fall on either side of models/broadcast.py's EXPAND_MIN, in every mix. Hidden 64, 4 heads, 2 KV heads at
# 32 rows of 24 tokens (scores big, hidden states small) failed to compile: "The func graph is empty ... expand".
SHAPES = [(64, 4, 2, 32, 24), (64, 4, 2, 1, 24), (64, 4, 2, 8, 24), (64, 4, 2, 16, 40), (32, 4, 2, 32, 24),
          (64, 4, 4, 32, 16), (128, 8, 2, 32, 8), (128, 8, 2, 32, 32), (48, 6, 2, 4, 12), (64, 2, 1, 32, 30),
          (32, 4, 1, 2, 64)]


@pytest.mark.parametrize("hidden, heads, kv_heads, rows, tokens", SHAPES,
                         ids=[f"h{h}-q{q}-kv{kv}-b{b}-t{t}" for h, q, kv, b, t in SHAPES])
def test_training_graph_compiles_and_matches_pytorch_across_shapes(tmp_path, hidden, heads, kv_heads, rows, tokens,
                                                                    rng):
    """The actor's update graph (trainer/actor_graphs.py: log-probs of the response tokens only, through the
    decoder's and TokenStats' own backwards) compiles at each shape, and the loss and every gradient match
    PyTorch's."""
    import mindspore as ms
    from mindspore import Tensor, nn
    from conftest import make_hf_checkpoint
    from mindrl.models import from_pretrained
    from mindrl.parallel.layout import to_external, transposed_names
    from mindrl.runtime import setup_context
    from mindrl.trainer.actor_graphs import ResponseLogProbs
    setup_context("graph")
    model = make_hf_checkpoint(tmp_path, "qwen2", hidden_size=hidden, intermediate_size=2 * hidden,
                               num_attention_heads=heads, num_key_value_heads=kv_heads, num_hidden_layers=1).float()
    response = 6  # as in the tiny task: the logits of a few positions, far below EXPAND_MIN
    ids = rng.integers(0, model.config.vocab_size, size=(rows, tokens)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[0, : tokens // 3] = 0           # left padding
    mask[-1, tokens - response // 2:] = 0  # right padding (the same row when there is one)
    # a prediction counts when both its position and its target are real tokens (padding rows are arbitrary)
    weights = rng.uniform(0.5, 1.5, size=(rows, response)).astype(np.float32) * mask[:, -response:] \
        * mask[:, -response - 1:-1]
    with_prompt = np.concatenate([np.zeros((rows, tokens - 1 - response), np.float32), weights], 1)
    want_loss, want = _torch_grads(model, ids, mask, with_prompt)
    lm = from_pretrained(str(tmp_path)).net

    class Loss(nn.Cell):
        def __init__(self):
            super().__init__(auto_prefix=False)
            self.scorer = ResponseLogProbs(lm, 1.0)

        def construct(self, ids, mask, response_mask, w):
            logp, _ = self.scorer(ids, mask, response_mask)
            return -(logp * w).sum()

    params = lm.trainable_params()
    loss, grads = ms.value_and_grad(Loss(), None, params)(Tensor(ids), Tensor(mask),
                                                          Tensor(mask[:, -response:]), Tensor(weights))
    assert float(loss.asnumpy()) == pytest.approx(want_loss, rel=1e-5)
    trans = transposed_names(lm)
    got = {p.name: to_external(g.asnumpy(), p.name in trans) for p, g in zip(params, grads)}
    assert sorted(got) == sorted(want)
    for name, g in want.items():
        err = np.abs(got[name] - g).max() / max(np.abs(g).max(), 1e-3)
        assert err < 2e-4, f"{name}: max error {err:.2e} of the gradient's largest entry"
