"""PPO on the one loop: the PPO-ptx term against float64 and against an independent SFT loss, and a resumed PPO run
(actor, critic, both optimizers, the adaptive KL controller, the ptx data position) repeating the uninterrupted
trajectory: metrics, weights and both optimizers' moments and step counters."""
import json
import os
import shutil
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
CONFIG = os.path.join(ROOT, "examples", "ppo", "tiny_math.yaml")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    from conftest import make_grpo_workdir, make_sft_mindrecord
    d = make_grpo_workdir(tmp_path_factory.mktemp("ppo"))
    make_sft_mindrecord(d)
    return d


def ppo_settings(d, run, **over):
    """PPO (gae, a critic from the policy with a zero head) on the tiny workdir: 16 prompts x 1 response,
    2 mini-batches of 8, micro-batches of 4."""
    from conftest import tiny_run_settings
    s = tiny_run_settings(d, d / run / "logs", **{
        "rl_config.adv_estimator": "gae", "rl_config.n_samples_per_prompt": 1, "rl_config.global_batch_size": 16,
        "rl_config.mini_batch_size": 8, "rl_config.micro_batch_size": 4, "rl_config.critic_warmup": 0,
        "rl_config.kl_coef": 0.05, "rl_config.use_kl_in_reward": "true", "rl_config.kl_penalty": "kl",
        "rl_config.verifier_function": "[last_number,ones]", "rl_config.verifier_weight": "[1.0,1.0]",
        "generate_config.max_tokens": 6, "critic_config.lr": 1e-3, "critic_config.lr_warmup_iters": 0,
        "eval.interval": 0, "eval.path": "null"})
    s.pop("rl_config.dynamic_sampling")
    s.update(over)
    return s


def trainer_for(d, run, **over):
    from conftest import as_overrides
    from mindrl.config import load_train_config
    from mindrl.trainer import RLTrainer
    return RLTrainer(load_train_config(CONFIG, as_overrides(ppo_settings(d, run, **over))))


def test_ptx_loss_and_gradient(workdir):
    """The ptx term of one mini-batch: its loss equals a float64 masked NLL from the model's logits, and the
    gradient it adds to the actor's buffers equals pretrain_coef x the gradient of a masked NLL written here (another
    code path: full logits, MindSpore's log_softmax, no vocab-parallel scoring) on the same rows."""
    import mindspore as ms
    from mindspore import Tensor
    coef = 0.5
    t = trainer_for(workdir, "ptx", **{"rl_config.pretrain_coef": coef,
                                       "data.ptx_path": str(workdir / "sft.mindrecord")})
    ptx = t.policy.ptx
    assert ptx is not None and t.cfg.data.ptx_path.endswith("sft.mindrecord")
    ptx.begin_step()
    ids, mask = ptx.ids, ptx.mask
    assert mask.sum() > 0 and (mask[:, 0] == 0).all()  # the prompt's tokens are not trained on
    rows = np.arange(len(ids) // 2)  # chunk 0 of 2
    accum = t.policy.updater.accumulate.accum
    got = ptx.run_chunk(0, 2)[0]

    logits = t.policy.net(Tensor(ids[rows]), Tensor(np.ones_like(ids[rows]))).asnumpy().astype(np.float64)
    z = logits[:, :-1]
    logp = z - z.max(-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
    picked = np.take_along_axis(logp, ids[rows, 1:, None].astype(np.int64), -1)[..., 0]
    m = mask[rows, 1:].astype(np.float64)
    want = -(picked * m).sum() / m.sum()
    assert got == pytest.approx(want, rel=1e-5)

    class FullLogitsNLL(ms.nn.Cell):  # another path than PPO-ptx's cell: full logits, MindSpore's log_softmax
        def __init__(self, lm):
            super().__init__()
            self.lm = lm

        def construct(self, ids, mask):
            logp = ms.ops.log_softmax(self.lm(ids, ms.ops.ones_like(ids))[:, :-1], -1)
            picked = ms.ops.gather_elements(logp, -1, ids[:, 1:].expand_dims(-1)).squeeze(-1)
            m = mask[:, 1:].astype(ms.float32)
            return -(picked * m).sum() / m.sum()

    params = t.policy.net.trainable_params()
    grad_fn = ms.value_and_grad(FullLogitsNLL(t.policy.net), None, params)
    _, grads = grad_fn(Tensor(ids[rows]), Tensor(mask[rows]))
    for p, g, a in zip(params, grads, accum):
        np.testing.assert_allclose(a.asnumpy(), coef * g.asnumpy(), rtol=2e-4, atol=1e-7, err_msg=p.name)


def test_ptx_refusals(workdir, tmp_path):
    from conftest import as_overrides
    from mindrl.config import ConfigError, load_train_config
    from mindrl.trainer.preflight import preflight
    # the prompt file has no pretrain_ids: named before anything is built
    cfg = load_train_config(CONFIG, as_overrides(ppo_settings(workdir, "r1", **{"rl_config.pretrain_coef": 0.1})))
    with pytest.raises(ConfigError, match=r"rl_config.pretrain_coef: .*train.mindrecord.* no pretrain_ids"):
        preflight(cfg)
    # a ptx file without PPO-ptx is a key with no effect
    with pytest.raises(ConfigError, match=r"data.ptx_path: .*has no effect"):
        load_train_config(CONFIG, as_overrides(ppo_settings(workdir, "r2", **{
            "data.ptx_path": str(workdir / "sft.mindrecord")})))
    # 6 SFT rows per update (mini_batch_size 6 of 12 prompts) in micro-batches of 4
    with pytest.raises(ConfigError, match=r"rl_config.pretrain_coef: PPO-ptx's 6 supervised rows per update .* micro-batches of rl_config.micro_batch_size 4"):
        load_train_config(CONFIG, as_overrides(ppo_settings(workdir, "r4", **{
            "rl_config.pretrain_coef": 0.1, "rl_config.global_batch_size": 12, "rl_config.mini_batch_size": 6,
            "rl_config.n_samples_per_prompt": 2, "data.ptx_path": str(workdir / "sft.mindrecord")})))


RESUME = {"rl_config.train_iters": 4, "rl_config.critic_warmup": 1, "rl_config.kl_ctrl_type": "adaptive",
          "rl_config.kl_target": 0.001, "rl_config.kl_horizon": 64, "rl_config.pretrain_coef": 0.2,
          "rl_config.ppo_epochs": 2, "actor_config.save_interval": 2}


def read_steps(path):
    with open(path) as fh:
        return [r for r in map(json.loads, fh) if "timing/all" in r]


@pytest.fixture(scope="module")
def full_run(workdir):
    """The uninterrupted 4-step run, saving at steps 2 and 4, with both optimizers' state as it was in memory at
    each save (read from the networks, not from the files the resume reads); ``src`` holds its step-2 checkpoint."""
    d, ptx = workdir, str(workdir / "sft.mindrecord")
    full = trainer_for(d, "full", **RESUME, **{"data.ptx_path": ptx, "actor_config.save": str(d / "full" / "ckpt")})
    at_save, save = {}, full.save

    def save_and_record():
        at_save[full.step] = {role: optimizer_state(getattr(full, role)) for role in ("policy", "critic")}
        return save()
    full.save = save_and_record
    full.fit()
    assert sorted(at_save) == [2, 4]
    ck = d / "full" / "ckpt" / "iter_0000002"
    shutil.copytree(ck, d / "src" / "iter_0000002")
    (d / "src" / "latest_checkpointed_iteration.txt").write_text("2")
    return full, at_save


def resumed_trainer(d, run, **over):
    return trainer_for(d, run, **RESUME, **{
        "data.ptx_path": str(d / "sft.mindrecord"), "actor_config.save": str(d / run / "ckpt"),
        "actor_config.finetune": "false", "actor_config.load": str(d / "src"),
        "ref.ref_model_load_path": str(d / "policy")}, **over)


def optimizer_state(role) -> dict:
    """The role's AdamW state, {name: float64 array}: adam_m.*, adam_v.* and the step counter."""
    return {p.name: p.asnumpy().astype(np.float64) for p in role.updater.optimizer.state_parameters()}


def step_counter(state: dict) -> float:
    (name,) = [k for k in state if k.endswith("global_step")]
    return float(state[name])


def assert_same_optimizer_state(want: dict, got: dict, steps: int, what):
    """Same names, the step counter ``steps`` in both, and every moment equal to 1e-5 of its norm (it is exact
    here: a resumed run repeats the same float32 operations)."""
    assert sorted(want) == sorted(got), what
    assert step_counter(want) == step_counter(got) == steps, (what, step_counter(want), step_counter(got))
    moments = [k for k in want if k.startswith(("adam_m.", "adam_v."))]
    assert len(moments) == len(want) - 1, what
    for k in moments:
        assert np.abs(want[k]).max() > 0, (what, k)  # every moment has been written
        scale = float(np.linalg.norm(want[k]))
        assert np.linalg.norm(want[k] - got[k]) <= 1e-5 * scale, (what, k, np.linalg.norm(want[k] - got[k]) / scale)


# optimizer steps after each RL step: 2 epochs x 2 mini-batches per step, and the policy skips step 1 (the critic's
# warm-up)
OPTIMIZER_STEPS = {"policy": lambda step: 4 * (step - 1), "critic": lambda step: 4 * step}


@pytest.mark.slow
def test_ppo_resume_repeats_the_trajectory(workdir, full_run):
    d = workdir
    full, at_save = full_run
    rows = read_steps(d / "full" / "logs" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert "actor/pg_loss" not in rows[0] and "actor/pg_loss" in rows[1]  # the critic's warm-up step
    ck = d / "full" / "ckpt" / "iter_0000002"
    assert {"critic", "policy", "trainer_state.json"} <= set(os.listdir(ck))
    assert json.loads((ck / "trainer_state.json").read_text())["kl_ctrl"]["value"] != 0.05  # it adapted

    resumed = resumed_trainer(d, "resumed")
    # right after the resume: both optimizers as the uninterrupted run had them in memory at step 2
    for role in ("policy", "critic"):
        assert_same_optimizer_state(at_save[2][role], optimizer_state(getattr(resumed, role)),
                                    OPTIMIZER_STEPS[role](2), (role, "resumed at step 2"))
    resumed.fit()
    again = read_steps(d / "resumed" / "logs" / "metrics.jsonl")
    assert [r["step"] for r in again] == [3, 4]
    for a, b in zip(rows[2:], again):
        for key in ("critic/score/mean", "actor/pg_loss", "actor/ptx_loss", "actor/grad_norm", "critic/vf_loss",
                    "critic/grad_norm", "critic/values/mean", "actor/reward_kl_penalty_coeff",
                    "response_length/mean"):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), key
    for role in ("policy", "critic"):
        wa, wb = getattr(full, role).state_dict(), getattr(resumed, role).state_dict()
        assert sorted(wa) == sorted(wb)
        assert all(np.allclose(wa[k], wb[k], rtol=1e-5, atol=1e-7) for k in wa), role
        # and at step 4 (Adam's step size depends on the moments: a resume that restored the weights but not the
        # moments would show in the weights only later)
        assert_same_optimizer_state(at_save[4][role], optimizer_state(getattr(resumed, role)),
                                    OPTIMIZER_STEPS[role](4), (role, "step 4"))


@pytest.mark.slow
@pytest.mark.parametrize("fresh", ["policy", "critic"])
def test_no_load_optim_starts_only_that_roles_optimizer_afresh(workdir, full_run, fresh):
    """actor_config.no_load_optim / critic_config.no_load_optim (docs/configuration.md, docs/ppo.md): on resume
    that role's optimizer starts afresh (zero moments, step 0) and the other one is restored."""
    _, at_save = full_run
    section = {"policy": "actor_config", "critic": "critic_config"}[fresh]
    t = resumed_trainer(workdir, f"fresh_{fresh}", **{f"{section}.no_load_optim": "true"})
    for role in ("policy", "critic"):
        state = optimizer_state(getattr(t, role))
        if role == fresh:
            assert step_counter(state) == 0 and all(np.abs(v).max() == 0 for v in state.values()), role
        else:
            assert_same_optimizer_state(at_save[2][role], state, OPTIMIZER_STEPS[role](2), (role, "restored"))


@pytest.mark.slow
def test_critic_values_from_its_update_equal_a_value_pass(workdir, monkeypatch):
    """With one update per step the critic's update gives the step's values (CriticValuesLossCell: its forward's
    values, GAE's returns in its graph), and no value pass runs. The same 3 steps with the value pass of its own
    and the host's GAE, forced here, give the same values, advantages, losses and weights: the two are one
    algorithm."""
    from mindrl.config.batch_plan import BatchPlan
    one_update = {"rl_config.mini_batch_size": 16, "rl_config.use_kl_in_reward": "true",
                  "rl_config.gamma": 0.99, "rl_config.lam": 0.9}

    def run(name):
        t = trainer_for(workdir, name, **one_update)
        seen, make = [], t.compute_estimator

        def record(exp):
            make(exp)
            seen.append((exp.values.copy(), exp.returns.copy(), exp.advantages.copy(), exp.loss_mask.copy()))
        t.compute_estimator = record
        steps = [t.train_step() for _ in range(3)]
        return t, steps, seen

    fused, fused_steps, fused_seen = run("values_in_update")
    assert fused.critic.values_in_update and fused.run.plan.batch.updates == 1
    assert all("timing/critic_model" not in m for m in fused_steps)  # no value pass
    monkeypatch.setattr(BatchPlan, "critic_values_in_update", property(lambda self: False))
    apart, apart_steps, apart_seen = run("values_apart")
    assert not apart.critic.values_in_update
    assert all("timing/critic_model" in m for m in apart_steps)
    for (v, ret, adv, mask), (v2, ret2, adv2, mask2) in zip(fused_seen, apart_seen):
        np.testing.assert_array_equal(mask, mask2)  # the same responses
        np.testing.assert_allclose(v * mask, v2 * mask, atol=2e-5)
        np.testing.assert_allclose(ret, ret2, atol=2e-5)
        np.testing.assert_allclose(adv, adv2, atol=1e-4)
    assert np.abs(fused_seen[-1][0] * fused_seen[-1][3]).max() > 1e-3  # the critic has learnt by the last step
    for a, b in zip(fused_steps, apart_steps):
        for key in ("critic/vf_loss", "critic/vpred_mean", "critic/grad_norm", "actor/pg_loss", "actor/grad_norm"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key
        assert a["critic/vf_clipfrac"] == 0.0
    want, got = apart.critic.state_dict(), fused.critic.state_dict()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], atol=1e-5, err_msg=name)


@pytest.mark.slow
def test_actor_and_critic_share_accumulation_buffers_without_changing_the_run(workdir, monkeypatch):
    """The critic adds its gradients into the actor's accumulation buffers (one model's worth of buffers, not two):
    every buffer is zero again after the step (so the actor's next update starts clean), and a step with each
    network's own buffers gives the same metrics and weights (a buffer the first network to update left holding a
    gradient would move the second's update)."""
    from mindrl.trainer.updater import GradientBuffers

    def run(name):
        t = trainer_for(workdir, name)
        steps = [t.train_step()]
        actor, critic = t.policy.updater.accumulate.accum, t.critic.updater.accumulate.accum
        for buf in list(actor) + list(critic):
            assert not buf.asnumpy().any(), f"{buf.name} holds a gradient after the step"
        return t, steps, actor, critic

    shared, shared_steps, actor, critic = run("buffers_shared")
    critic_params = shared.critic.updater.optimizer.params
    same_shape = sum(any(tuple(p.shape) == tuple(q.shape) for q in shared.policy.updater.optimizer.params)
                     for p in critic_params)
    assert same_shape >= len(critic_params) - 2  # all but the value head's
    assert sum(any(c is a for a in actor) for c in critic) == same_shape

    take = GradientBuffers.take
    monkeypatch.setattr(GradientBuffers, "take", lambda self, params, prefix="accum": take(GradientBuffers(), params,
                                                                                           prefix))
    apart, apart_steps, actor2, critic2 = run("buffers_apart")
    assert not any(c is a for c in critic2 for a in actor2)
    for a, b in zip(shared_steps, apart_steps):
        for key in ("actor/pg_loss", "actor/grad_norm", "critic/vf_loss", "critic/grad_norm"):
            assert a[key] == pytest.approx(b[key], rel=1e-6, abs=1e-8), key
    for role in ("policy", "critic"):
        want, got = getattr(apart, role).state_dict(), getattr(shared, role).state_dict()
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=0, atol=1e-7, err_msg=f"{role} {name}")
