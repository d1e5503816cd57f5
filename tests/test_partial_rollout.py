"""Partial rollout (rl_config.partial_rollout_max_split) and truncated importance sampling (rl_config.tis_cap)."""
import json
import os
import shutil

import numpy as np
import pytest

from mindrl.algorithms.tis import tis_weights

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# many stop ids: the tiny random policy's responses end at varied lengths, so groups end in different rounds
STOPS = "[" + ",".join(str(t) for t in range(20, 60)) + "]"


def reference_tis_loss(log_prob, old, rollout, adv, mask, cap, clip=0.2, clip_c=None):
    """verl's TIS on the clipped surrogate, token-mean, in float64."""
    log_prob, old, rollout, adv, mask = (np.asarray(x, np.float64) for x in (log_prob, old, rollout, adv, mask))
    r = np.exp(log_prob - old)
    loss = np.maximum(-adv * r, -adv * np.clip(r, 1 - clip, 1 + clip))
    if clip_c is not None:
        loss = np.where(adv < 0, np.minimum(loss, -adv * clip_c), loss)
    loss = loss * np.minimum(np.exp(old - rollout), cap)
    return (loss * mask).sum() / mask.sum()


@pytest.mark.parametrize("clip_c", [None, 3.0])
def test_tis_weighted_advantages_give_the_corrected_loss(clip_c, rng):
    import mindspore as ms
    from mindspore import Tensor
    from mindrl.algorithms.losses import policy_loss
    shape = (5, 7)
    log_prob = rng.normal(-2.0, 0.5, shape)
    old = log_prob + rng.normal(0, 0.3, shape)
    rollout = old + rng.normal(0, 1.0, shape)   # an older policy's: ratios far from 1, some above the cap
    adv = rng.normal(0, 1.0, shape)
    mask = (rng.random(shape) > 0.2).astype(np.float64)
    w, metrics = tis_weights(old.astype(np.float32), rollout.astype(np.float32), mask, cap=2.0)
    assert 0 < metrics["actor/tis_clipfrac"] < 1
    ratio = np.exp(old - rollout)
    assert metrics["actor/tis_ratio_mean"] == pytest.approx(ratio[mask > 0].mean(), rel=1e-5)
    f32 = lambda a: Tensor(np.asarray(a, np.float32), ms.float32)  # noqa: E731
    got, _, _ = policy_loss(f32(log_prob), f32(old), f32(adv * w), f32(mask), 0.2, 0.2, clip_c)
    want = reference_tis_loss(log_prob, old, rollout, adv, mask, 2.0, clip_c=clip_c)
    assert float(got.asnumpy()) == pytest.approx(want, rel=2e-5, abs=1e-6)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    from conftest import make_grpo_workdir
    return make_grpo_workdir(tmp_path_factory.mktemp("partial"))


def make_config(workdir, run, **over):
    from conftest import tiny_run_config
    return tiny_run_config(workdir, run, {
        "rl_config.train_iters": 4, "rl_config.partial_rollout_max_split": 3, "rl_config.tis_cap": 2.0,
        "generate_config.max_tokens": 6, "generate_config.stop_token_ids": STOPS,
        "actor_config.save": str(workdir / run / "ckpt"), "actor_config.save_interval": 2}, over)


def rows_of(path):
    with open(path) as fh:
        return [r for r in map(json.loads, fh) if "timing/all" in r]


def test_partial_rollout_carries_responses_across_steps_and_resumes_them(workdir):
    from mindrl.trainer import RLTrainer
    full = RLTrainer(make_config(workdir, "full"))
    full.fit()
    rows = rows_of(workdir / "full" / "logs" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert rows[0]["rollout/stale_fraction"] == 0.0  # nothing was sampled before the first step
    assert any(r["rollout/stale_fraction"] > 0 for r in rows[1:])  # later steps train on carried tokens
    assert all(r["response_length/max"] <= 6 for r in rows)
    for r in rows:
        assert np.isfinite(r["actor/tis_ratio_mean"]) and 0 <= r["actor/tis_clipfrac"] <= 1
        assert r["timing/old_log_p"] > 0  # the old log-probs are the current policy's, not the rollout's
    state = json.loads((workdir / "full" / "ckpt" / "iter_0000002" / "trainer_state.json").read_text())
    saved = state["partial_rollout"]
    assert saved["paused"] or saved["ready"]  # the checkpoint holds responses still in flight

    # resume at step 2 in a fresh directory: steps 3 and 4 continue the same paused responses
    shutil.copytree(workdir / "full" / "ckpt" / "iter_0000002", workdir / "src" / "iter_0000002")
    (workdir / "src" / "latest_checkpointed_iteration.txt").write_text("2")
    resumed = RLTrainer(make_config(workdir, "resumed", **{"actor_config.finetune": "false",
                                                           "actor_config.load": str(workdir / "src")}))
    resumed.fit()
    again = rows_of(workdir / "resumed" / "logs" / "metrics.jsonl")
    assert [r["step"] for r in again] == [3, 4]
    for a, b in zip(rows[2:], again):
        for key in ("grpo/score/mean", "actor/pg_loss", "actor/grad_norm", "response_length/mean",
                    "rollout/stale_fraction", "actor/tis_ratio_mean", "rollout/rounds"):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), key
    wa, wb = full.policy.state_dict(), resumed.policy.state_dict()
    assert all(np.allclose(wa[k], wb[k], rtol=1e-5, atol=1e-7) for k in wa)


def test_plan_prints_the_rounds_and_refuses_what_it_cannot_do(workdir):
    from mindrl.config import ConfigError
    from mindrl.config.plan import plan_run
    cfg = make_config(workdir, "plan")
    text = plan_run(cfg, 1).text()
    assert "partial rollout: at most 2 new tokens per response and round, 3 rounds at most" in text
    assert "min(exp(old - rollout log-prob), 2) (TIS)" in text
    assert "recomputed before the updates" in text
    with pytest.raises(ConfigError, match="rl_config.partial_rollout_max_split"):
        make_config(workdir, "x", **{"rl_config.partial_rollout_max_split": 7})   # more rounds than tokens
    with pytest.raises(ConfigError, match="dynamic_sampling"):
        make_config(workdir, "x", **{"rl_config.dynamic_sampling": "true"})
    with pytest.raises(ConfigError, match="single rollout replica"):
        plan_run(make_config(workdir, "x", **{"rl_config.global_batch_size": 4}), 2)
