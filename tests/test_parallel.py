"""Tensor/data parallelism under msrun on CPU (2 workers), against single-process references."""
import json
import os
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(ROOT, "tests", "parallel_worker.py")
CONFIG = os.path.join(ROOT, "examples", "grpo", "tiny_math.yaml")

pytestmark = pytest.mark.msrun


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def msrun(args, log_dir, workers=2, timeout=600):
    """Run ``args`` (a script and its arguments) on `workers` local msrun workers; return the exit code."""
    env = dict(os.environ, GLOG_v="3", PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    cmd = [os.path.join(os.path.dirname(sys.executable), "msrun"), f"--worker_num={workers}",
           f"--local_worker_num={workers}", f"--master_port={free_port()}", f"--log_dir={log_dir}", "--join=True"]
    res = subprocess.run(cmd + list(args), cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if res.returncode:
        logs = "".join(open(os.path.join(log_dir, f)).read()[-3000:] for f in sorted(os.listdir(log_dir))
                       if f.startswith("worker"))
        pytest.fail(f"msrun exited {res.returncode}\n{logs}")
    return res.returncode


@pytest.fixture(scope="module")
def hf_even(tmp_path_factory):
    from conftest import make_hf_checkpoint
    d = tmp_path_factory.mktemp("hf_qwen3_even")
    make_hf_checkpoint(d, "qwen3", vocab_size=210)  # vocab, heads, kv heads and MLP all divisible by tp=2
    return str(d)


def test_tp2_matches_tp1_and_reshard_roundtrip(hf_even, tmp_path):
    out = tmp_path / "layers.json"
    msrun([WORKER, "layers", hf_even, str(out)], str(tmp_path / "log"))
    res = json.loads(out.read_text())
    assert res["logits_rel"] <= 1e-5
    assert res["logprob_rel"] <= 1e-5
    assert res["grad_rel_max"] <= 1e-5          # every parameter's gradient shard, incl. Qwen3's q/k norms
    assert res["reshard_logits_rel"] <= 1e-5    # train tp=1 -> infer tp=2, in place
    assert res["storage_kept"]
    assert res["roundtrip_exact"]               # infer tp=2 -> train tp=1 gives back the same weights


@pytest.fixture(scope="module")
def grpo_dir(tmp_path_factory):
    from conftest import make_grpo_workdir
    d = make_grpo_workdir(tmp_path_factory.mktemp("pgrpo"))
    # dense: every decoded character contributes, so random-policy groups have reward variance
    (d / "digits.py").write_text("from mindrl.rewards import register_reward\n\n@register_reward('chars')\n"
                                 "def chars(response, label):\n    return sum(ord(c) % 7 for c in response) / 40.0\n")
    return d


def grpo_overrides(d, run):
    from conftest import as_overrides, tiny_run_settings
    return as_overrides(tiny_run_settings(d, d / run / "logs", **{
        "rl_config.verifier_function": "[chars]", "rl_config.verifier_weight": "[1.0]",
        "actor_config.save": str(d / run / "ckpt"), "actor_config.save_interval": 1}))


def test_grpo_step_infer_tp2_train_dp2_matches_single_process(grpo_dir, tmp_path):
    d = grpo_dir
    env = dict(os.environ, GLOG_v="3")
    single = subprocess.run([sys.executable, WORKER, "grpo", str(tmp_path / "single.json"), CONFIG]
                            + grpo_overrides(d, "single"), cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=600)
    assert single.returncode == 0, single.stderr[-3000:]
    msrun([WORKER, "grpo", str(tmp_path / "par.json"), CONFIG] + grpo_overrides(d, "par")
          + ["generate_config.infer_tensor_parallel_size=2", "actor_config.tensor_model_parallel_size=1"],
          str(tmp_path / "log"))
    a = json.loads((tmp_path / "single.json").read_text())
    b = json.loads((tmp_path / "par.json").read_text())
    assert a["grpo/score/mean"] == pytest.approx(b["grpo/score/mean"], rel=1e-6)   # identical rollouts
    assert a["actor/pg_loss"] != 0.0
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/entropy"):
        assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), key
    from mindrl.models.weights import TensorSource
    wa = TensorSource(str(d / "single" / "ckpt" / "iter_0000001"))
    wb = TensorSource(str(d / "par" / "ckpt" / "iter_0000001"))
    init = TensorSource(str(d / "policy"))
    assert sorted(wa.names()) == sorted(wb.names())
    for name in wa.names():
        x, y = wa.get(name), wb.get(name)
        assert np.linalg.norm(x - y) <= 1e-5 * np.linalg.norm(x), name
    assert max(float(np.abs(wa.get(n) - init.get(n)).max()) for n in wa.names()) > 1e-5  # it did update

    # the 2-rank checkpoint carries per-rank shards and a strategy file that MindSpore can merge offline
    par_ck = d / "par" / "ckpt" / "iter_0000001" / "policy"
    assert (par_ck / "rank_checkpoints" / "rank_1" / "checkpoint_1.ckpt").exists()
    assert (par_ck / "strategy" / "train_policy_strategy" / "strategy_0.json").exists()


def test_ppo_step_infer_tp2_train_dp2_critic_dp2_matches_single_process(grpo_dir, tmp_path):
    """One PPO step (critic from the policy, GAE, KL in the reward, PPO-ptx, 2 mini-batches) under msrun with
    infer tp=2, actor dp=2 and critic dp=2 equals the single-process step: losses, policy and critic weights."""
    from conftest import make_sft_mindrecord
    d = grpo_dir
    sft = make_sft_mindrecord(d) if not (d / "sft.mindrecord").exists() else d / "sft.mindrecord"
    ppo = ["rl_config.adv_estimator=gae", "rl_config.n_samples_per_prompt=1", "rl_config.global_batch_size=16",
           "rl_config.mini_batch_size=8", "rl_config.micro_batch_size=4", "rl_config.kl_coef=0.05",
           "rl_config.use_kl_in_reward=true", "rl_config.pretrain_coef=0.2", f"data.ptx_path={sft}",
           "critic_config.lr=1e-3"]
    env = dict(os.environ, GLOG_v="3")
    single = subprocess.run([sys.executable, WORKER, "grpo", str(tmp_path / "single.json"), CONFIG]
                            + grpo_overrides(d, "ppo_single") + ppo, cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=600)
    assert single.returncode == 0, single.stderr[-3000:]
    msrun([WORKER, "grpo", str(tmp_path / "par.json"), CONFIG] + grpo_overrides(d, "ppo_par") + ppo
          + ["generate_config.infer_tensor_parallel_size=2", "actor_config.tensor_model_parallel_size=1",
             "critic_config.tensor_model_parallel_size=1"], str(tmp_path / "log"))
    a = json.loads((tmp_path / "single.json").read_text())
    b = json.loads((tmp_path / "par.json").read_text())
    assert a["critic/score/mean"] == pytest.approx(b["critic/score/mean"], rel=1e-6)   # identical rollouts
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/ptx_loss", "actor/reward_kl_penalty", "critic/vf_loss",
                "critic/grad_norm", "critic/vf_clipfrac", "critic/values/mean", "critic/advantages/max"):
        assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), key
    from mindrl.models.weights import TensorSource
    for role, init in (("policy", d / "policy"), ("critic", None)):
        wa = TensorSource(str(d / "ppo_single" / "ckpt" / "iter_0000001" / role))
        wb = TensorSource(str(d / "ppo_par" / "ckpt" / "iter_0000001" / role))
        assert sorted(wa.names()) == sorted(wb.names()), role
        # all weights together to 1e-5; each tensor to 1e-4, since Adam divides by sqrt(v), and on a tensor with
        # tiny gradients (a key bias) the rounding difference of a 2-replica sum becomes a visible step
        diff = sum(float(np.sum((wa.get(n) - wb.get(n)) ** 2)) for n in wa.names())
        assert diff ** 0.5 <= 1e-5 * sum(float(np.sum(wa.get(n) ** 2)) for n in wa.names()) ** 0.5, role
        for name in wa.names():
            x, y = wa.get(name), wb.get(name)
            assert np.linalg.norm(x - y) <= 1e-4 * max(np.linalg.norm(x), 1e-12), (role, name)
    assert float(np.abs(TensorSource(str(d / "ppo_single" / "ckpt" / "iter_0000001" / "critic")).get(
        "score.weight")).max()) > 0  # the zero value head was trained


def test_train_tp2_checkpoint_merges_offline_with_mindspore(grpo_dir, tmp_path):
    """Train tp=2 / infer dp=2: MindSpore's transform_checkpoints merges mindrl's 2-rank checkpoint into one
    that loads in a single process and gives the logits of the gathered HF export."""
    d = grpo_dir
    msrun([WORKER, "grpo", str(tmp_path / "tp2.json"), CONFIG] + grpo_overrides(d, "tp2")
          + ["generate_config.infer_tensor_parallel_size=1", "actor_config.tensor_model_parallel_size=2"],
          str(tmp_path / "log"))
    m = json.loads((tmp_path / "tp2.json").read_text())
    assert np.isfinite(m["actor/pg_loss"]) and m["actor/grad_norm"] > 0
    ck = d / "tp2" / "ckpt" / "iter_0000001" / "policy"
    strategy = ck / "strategy" / "train_policy_strategy" / "strategy_0.json"
    layout = json.loads(strategy.read_text())["parallel_layout_item"]
    assert layout["model.layers.0.self_attn.q_proj.weight"]["tensor_map"] == [0, -1]
    assert layout["model.layers.0.mlp.down_proj.weight"]["tensor_map"] == [-1, 0]
    from mindrl.models import from_pretrained
    from mindrl.parallel.strategy import merge_rank_checkpoints
    merged = merge_rank_checkpoints(str(ck / "rank_checkpoints"), str(strategy), str(tmp_path / "merged"))
    single = from_pretrained(merged, model_config=str(ck / "config.json"))
    exported = from_pretrained(str(ck))
    ids = np.random.default_rng(0).integers(3, 150, size=(2, 12)).astype(np.int32)
    assert np.allclose(single.logits(ids), exported.logits(ids), rtol=0, atol=1e-6)
    import mindspore as ms
    moments = ms.load_checkpoint(merged)
    assert tuple(moments["adam_m.model.layers.0.mlp.gate_proj.weight"].shape) == (64, 32)  # full, merged


def test_only_save_strategy_writes_files_and_exits(grpo_dir, tmp_path):
    d = grpo_dir
    msrun(["python", "-m", "mindrl.cli", "train", "--config", CONFIG] + grpo_overrides(d, "strat")
          + ["generate_config.infer_tensor_parallel_size=2", "actor_config.tensor_model_parallel_size=1",
             "runtime.only_save_strategy=true", f"runtime.strategy_dir={tmp_path / 'strategy'}",
             "rl_config.kl_coef=0.01"], str(tmp_path / "log"))
    for stage in ("infer_policy", "train_policy", "train_ref"):
        for rank in (0, 1):
            f = tmp_path / "strategy" / f"{stage}_strategy" / f"strategy_{rank}.json"
            item = json.loads(f.read_text())["parallel_layout_item"]
            assert item["model.norm.weight"]["dev_matrix"] == ([1, 2] if stage == "infer_policy" else [2, 1])
    infer = json.loads((tmp_path / "strategy" / "infer_policy_strategy" / "strategy_0.json").read_text())
    assert infer["parallel_layout_item"]["model.embed_tokens.weight"]["tensor_map"] == [0, -1]
    assert not (d / "strat" / "ckpt").exists() and not (d / "strat" / "logs" / "metrics.jsonl").exists()
