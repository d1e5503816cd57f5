"""Shared prompts in the actor's update (rl_config.share_prompt): each group's n samples packed into one row
[prompt | response 1 | ... | response n] give the per-response rows' log-probs, entropies, loss and gradients."""
import os

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def grouped_rows(rng, vocab, groups, group, prompt, response):
    """Rows [groups * group, prompt + response]: each group one left-padded prompt (its own length), each row its
    own right-padded response; and the response mask [N, response] (at least one real token per row)."""
    n = groups * group
    ids = np.zeros((n, prompt + response), np.int32)
    mask = np.zeros_like(ids)
    for g in range(groups):
        real = prompt - 2 * g  # groups' prompts differ in length: different left padding
        p_ids = rng.integers(3, vocab, size=real)
        for i in range(g * group, (g + 1) * group):
            ids[i, prompt - real:prompt] = p_ids
            mask[i, prompt - real:prompt] = 1
            length = int(rng.integers(1, response + 1))
            ids[i, prompt:prompt + length] = rng.integers(3, vocab, size=length)
            mask[i, prompt:prompt + length] = 1
    return ids, mask, mask[:, prompt:].astype(np.float32)


@pytest.mark.parametrize("recompute", [False, True])
def test_packed_groups_give_the_rows_log_probs_and_gradients(tmp_path, rng, recompute):
    """The reference is the unpacked update graph (ResponseLogProbs, itself held against PyTorch's gradients in
    test_model_grads.py); every output at a real token and every gradient must agree, also with the layers'
    activation recompute (recompute_config.recompute) on."""
    import mindspore as ms
    from mindspore import Tensor, nn, ops
    from conftest import make_hf_checkpoint
    from mindrl.models import from_pretrained
    from mindrl.runtime import setup_context
    from mindrl.trainer.actor_graphs import ResponseLogProbs, SharedPromptLogProbs, pack_groups
    setup_context("graph")
    make_hf_checkpoint(tmp_path, "qwen2", hidden_size=32, intermediate_size=64, num_attention_heads=4,
                       num_key_value_heads=2, num_hidden_layers=2)
    lm = from_pretrained(str(tmp_path)).net
    if recompute:
        for layer in lm.model.layers:
            layer.recompute()
    groups, group, prompt, response = 2, 3, 7, 5
    ids, mask, rmask = grouped_rows(rng, lm.config.vocab_size, groups, group, prompt, response)
    weights = rng.uniform(0.5, 1.5, size=rmask.shape).astype(np.float32) * rmask

    class Loss(nn.Cell):
        def __init__(self, scorer, packed):
            super().__init__(auto_prefix=False)
            self.scorer, self.packed = scorer, packed

        def construct(self, ids, mask, response_mask, w):
            logp, ent = self.scorer(ids, mask, response_mask)
            w = w.reshape(logp.shape)
            return -(logp * w).sum() + 0.1 * (ent * w).sum(), ops.stop_gradient(logp), ops.stop_gradient(ent)

    params = lm.trainable_params()

    def run(scorer, packed, *inputs):
        (loss, logp, ent), grads = ms.value_and_grad(Loss(scorer, packed), None, params, has_aux=True)(
            *[Tensor(x) for x in inputs])
        return float(loss.asnumpy()), logp.asnumpy(), ent.asnumpy(), [g.asnumpy() for g in grads]

    want = run(ResponseLogProbs(lm, 0.7), False, ids, mask, rmask, weights)
    p_ids, p_seg = pack_groups(ids, mask, response, group)
    assert p_ids.shape == (groups, prompt + group * response)
    got = run(SharedPromptLogProbs(lm, 0.7, group), True, p_ids, p_seg, rmask.reshape(groups, group, response),
              weights.reshape(groups, group, response))
    real = rmask > 0
    assert got[0] == pytest.approx(want[0], rel=1e-5)
    np.testing.assert_allclose(got[1][real], want[1][real], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[2][real], want[2][real], rtol=1e-5, atol=1e-5)
    for p, g, w in zip(params, got[3], want[3]):
        err = np.abs(g - w).max() / max(np.abs(w).max(), 1e-6)
        assert err < 1e-4, f"{p.name}: max error {err:.2e} of the gradient's largest entry"


def test_pack_groups_refuses_rows_that_are_not_groups(rng):
    from mindrl.trainer.actor_graphs import pack_groups
    ids, mask, _ = grouped_rows(rng, 50, 2, 3, 6, 4)
    p_ids, p_seg = pack_groups(ids, mask, 4, 3)
    # the prompt once, then each response with its own segment number (2, 3, 4); padding 0
    assert (p_ids[0, :6] == ids[0, :6]).all() and (p_ids[0, 6 + 4:6 + 8] == ids[1, 6:]).all()
    assert set(np.unique(p_seg[0, 6:])) <= {0, 2, 3, 4} and (p_seg[0, :6] == mask[0, :6]).all()
    swapped = ids.copy()
    swapped[[2, 3]] = swapped[[3, 2]]  # row 2 (group 0) now holds group 1's prompt
    with pytest.raises(ValueError, match="groups of 3"):
        pack_groups(swapped, mask, 4, 3)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    from conftest import make_grpo_workdir
    return make_grpo_workdir(tmp_path_factory.mktemp("shared"))


def make_config(workdir, run, **over):
    from conftest import tiny_run_config
    return tiny_run_config(workdir, run, {
        "rl_config.train_iters": 2, "rl_config.global_batch_size": 4, "rl_config.mini_batch_size": 2,
        "rl_config.micro_batch_size": 4, "rl_config.kl_coef": 0.05, "rl_config.use_kl_in_loss": "true"}, over)


def test_plan_says_whether_prompts_are_shared_and_refuses_what_cannot_be(workdir):
    from mindrl.config import ConfigError
    from mindrl.config.plan import plan_run
    lines = "\n".join(plan_run(make_config(workdir, "p"), 1).lines())
    assert "each prompt computed once for its 4 samples" in lines
    assert "in the passes: update, old-log-prob, reference" in lines  # two updates: old log-probs recomputed
    one_update = plan_run(make_config(workdir, "p", **{"rl_config.mini_batch_size": 4}), 1).lines()
    assert "in the passes: update, reference" in "\n".join(one_update)  # the rollout's own: no old-log-prob pass
    lines = "\n".join(plan_run(make_config(workdir, "p", **{"rl_config.micro_batch_size": 2}), 1).lines())
    assert "micro_batch_size 2 is not a multiple of n_samples_per_prompt 4" in lines
    assert not plan_run(make_config(workdir, "p", **{"rl_config.share_prompt": "false"}), 1).batch.shared_prompt
    with pytest.raises(ConfigError, match="rl_config.share_prompt"):
        plan_run(make_config(workdir, "p", **{"rl_config.micro_batch_size": 2, "rl_config.share_prompt": "true"}), 1)


def test_grpo_steps_with_shared_prompts_match_unshared(workdir):
    """Two GRPO steps (two updates each, so old log-probs are recomputed; a KL term in the loss, so the reference
    scores; shuffle off so both see the same mini-batches): the same metrics and weights with and without shared
    prompts, in the update and in both log-prob passes."""
    from conftest import assert_same_steps, steps_and_weights
    from mindrl.trainer import RLTrainer
    out = {}
    for share in ("true", "false"):
        t = RLTrainer(make_config(workdir, f"s{share}", **{"rl_config.share_prompt": share,
                                                           "rl_config.shuffle_minibatch": "false"}))
        assert t.run.plan.batch.shared_prompt == (share == "true")
        out[share] = steps_and_weights(t)
    assert_same_steps(out["true"], out["false"])
