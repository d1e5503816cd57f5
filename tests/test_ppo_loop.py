"""PPO on the one loop: the PPO-ptx term against float64 and against an independent SFT loss, and a resumed PPO run
(actor, critic, both optimizers, the adaptive KL controller, the ptx data position) repeating the uninterrupted
trajectory."""
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
    gradient it adds to the actor's buffers equals pretrain_coef x the gradient of mindrl's SFT loss (another
    code path: full logits, no vocab-parallel scoring) on the same rows."""
    import mindspore as ms
    from mindspore import Tensor
    from mindrl.trainer.sft import SFTLoss
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

    loss = SFTLoss(t.policy.net)
    params = t.policy.net.trainable_params()
    grad_fn = ms.value_and_grad(loss, None, params)
    _, grads = grad_fn(Tensor(ids[rows]), Tensor(np.ones_like(ids[rows])), Tensor(mask[rows]))
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
    # 2 prompts x 3 responses in mini-batches of 2: 2 SFT rows cannot split over 3 mini-batches
    with pytest.raises(ConfigError, match=r"rl_config.pretrain_coef: .*over its 3 mini-batches"):
        load_train_config(CONFIG, as_overrides(ppo_settings(workdir, "r3", **{
            "rl_config.pretrain_coef": 0.1, "rl_config.global_batch_size": 2, "rl_config.n_samples_per_prompt": 3,
            "rl_config.mini_batch_size": 2, "rl_config.micro_batch_size": 2,
            "data.ptx_path": str(workdir / "sft.mindrecord")})))
    # 6 SFT rows per mini-batch in micro-batches of 4
    with pytest.raises(ConfigError, match=r"rl_config.pretrain_coef: .*micro_batch_size = 4"):
        load_train_config(CONFIG, as_overrides(ppo_settings(workdir, "r4", **{
            "rl_config.pretrain_coef": 0.1, "rl_config.global_batch_size": 12, "rl_config.mini_batch_size": 12,
            "rl_config.n_samples_per_prompt": 2, "data.ptx_path": str(workdir / "sft.mindrecord")})))


RESUME = {"rl_config.train_iters": 4, "rl_config.critic_warmup": 1, "rl_config.kl_ctrl_type": "adaptive",
          "rl_config.kl_target": 0.001, "rl_config.kl_horizon": 64, "rl_config.pretrain_coef": 0.2,
          "rl_config.ppo_epochs": 2, "actor_config.save_interval": 2}


def read_steps(path):
    with open(path) as fh:
        return [r for r in map(json.loads, fh) if "timing/all" in r]


@pytest.mark.slow
def test_ppo_resume_repeats_the_trajectory(workdir):
    d, ptx = workdir, str(workdir / "sft.mindrecord")
    full = trainer_for(d, "full", **RESUME, **{"data.ptx_path": ptx, "actor_config.save": str(d / "full" / "ckpt")})
    full.fit()
    rows = read_steps(d / "full" / "logs" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert "actor/pg_loss" not in rows[0] and "actor/pg_loss" in rows[1]  # the critic's warm-up step
    ck = d / "full" / "ckpt" / "iter_0000002"
    assert {"critic", "policy", "trainer_state.json"} <= set(os.listdir(ck))
    assert json.loads((ck / "trainer_state.json").read_text())["kl_ctrl"]["value"] != 0.05  # it adapted

    shutil.copytree(ck, d / "src" / "iter_0000002")
    (d / "src" / "latest_checkpointed_iteration.txt").write_text("2")
    resumed = trainer_for(d, "resumed", **RESUME, **{
        "data.ptx_path": ptx, "actor_config.save": str(d / "resumed" / "ckpt"), "actor_config.finetune": "false",
        "actor_config.load": str(d / "src"), "ref.ref_model_load_path": str(d / "policy")})
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
