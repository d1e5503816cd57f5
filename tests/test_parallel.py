"""Tensor/data parallelism under msrun on CPU (2 workers), against single-process references."""
import json
import os
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
    assert res["large_entropy_err"] <= 2e-4     # logits near 1e4, float64 reference (as test_entropy_is_stable)
    assert res["large_logp_err"] <= 2e-4
    assert res["reshard_logits_rel"] <= 1e-5    # train tp=1 -> infer tp=2, in place
    assert res["storage_kept"]
    assert res["roundtrip_exact"]               # infer tp=2 -> train tp=1 gives back the same weights
    # LoRA between layouts: the rollout copy gets the merged W + s A B, in both directions
    assert res["lora_tp_logits_rel"] <= 1e-5 and res["lora_changes_logits_rel"] > 1e-3
    assert res["lora_reshard_to_tp2_rel"] <= 1e-5
    assert res["lora_reshard_to_tp1_rel"] <= 1e-5


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


# a slot pool smaller than the batch (continuous batching), rounds of 2 tokens (partial rollout), TIS, and stop ids
# that end the tiny policy's responses at varied lengths
ROLLOUT_FEATURES = ["generate_config.max_num_seqs=8", "rl_config.partial_rollout_max_split=3", "rl_config.tis_cap=2.0",
                    "generate_config.max_tokens=6",
                    "generate_config.stop_token_ids=[" + ",".join(str(t) for t in range(20, 60)) + "]"]


def test_grpo_step_infer_tp2_train_dp2_matches_single_process(grpo_dir, tmp_path):
    """With the rollout's features on (ROLLOUT_FEATURES). The same layouts without them (every response starting
    at once) are the PPO test's below and test_grpo_train_tp2_matches_single_process's rollout."""
    d = grpo_dir
    a, b = run_both_ways(d, tmp_path, "features", ROLLOUT_FEATURES,
                         ["generate_config.infer_tensor_parallel_size=2", "actor_config.tensor_model_parallel_size=1"])
    assert a["grpo/score/mean"] == pytest.approx(b["grpo/score/mean"], rel=1e-6)   # identical rollouts
    assert a["actor/pg_loss"] != 0.0
    assert a["rollout/rounds"] == b["rollout/rounds"] > 1 and a["response_length/mean"] < 6
    assert a["actor/tis_ratio_mean"] == pytest.approx(b["actor/tis_ratio_mean"], rel=1e-6)
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/entropy"):
        assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), key
    from mindrl.models.weights import TensorSource
    wa = TensorSource(str(d / "features_single" / "ckpt" / "iter_0000001"))
    wb = TensorSource(str(d / "features_par" / "ckpt" / "iter_0000001"))
    init = TensorSource(str(d / "policy"))
    assert sorted(wa.names()) == sorted(wb.names())
    for name in wa.names():
        x, y = wa.get(name), wb.get(name)
        assert np.linalg.norm(x - y) <= 1e-5 * np.linalg.norm(x), name
    assert max(float(np.abs(wa.get(n) - init.get(n)).max()) for n in wa.names()) > 1e-5  # it did update

    # the 2-rank checkpoint carries per-rank shards and a strategy file that MindSpore can merge offline
    par_ck = d / "features_par" / "ckpt" / "iter_0000001" / "policy"
    assert (par_ck / "rank_checkpoints" / "rank_1" / "checkpoint_1.ckpt").exists()
    assert (par_ck / "strategy" / "train_policy_strategy" / "strategy_0.json").exists()


PPO = ["rl_config.adv_estimator=gae", "rl_config.n_samples_per_prompt=1", "rl_config.global_batch_size=16",
       "rl_config.mini_batch_size=8", "rl_config.micro_batch_size=4", "rl_config.kl_coef=0.05",
       "rl_config.use_kl_in_reward=true", "critic_config.lr=1e-3"]
PPO_LR, PPO_OPTIMIZER_STEPS = 1e-3, 2  # actor and critic lr; one epoch of 2 mini-batches of 8
# infer tp=2 (one rollout replica: the single process's samples), actor and critic dp=2
PPO_LAYOUTS = ["generate_config.infer_tensor_parallel_size=2", "actor_config.tensor_model_parallel_size=1",
               "critic_config.tensor_model_parallel_size=1"]


def run_both_ways(d, tmp_path, name, overrides, parallel):
    """A run of the worker (train_iters steps) in a single process and under msrun (``parallel``: the layouts);
    their metrics."""
    env = dict(os.environ, GLOG_v="3")
    single = subprocess.run([sys.executable, WORKER, "grpo", str(tmp_path / "single.json"), CONFIG]
                            + grpo_overrides(d, f"{name}_single") + overrides, cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=600)
    assert single.returncode == 0, single.stderr[-3000:]
    msrun([WORKER, "grpo", str(tmp_path / "par.json"), CONFIG] + grpo_overrides(d, f"{name}_par") + overrides
          + parallel, str(tmp_path / "log"))
    return json.loads((tmp_path / "single.json").read_text()), json.loads((tmp_path / "par.json").read_text())


def assert_same_update(single_ckpt, par_ckpt, init, what):
    """Each tensor's update W - W_init of the msrun step equals the single process's to 1e-5 of its norm, floored
    at 1e-5 of lr * steps * sqrt(size), the norm of an update that moves every element by lr at every step.

    Why the floor: Adam's step is ~lr per element whatever the gradient's size, so an element whose gradient is
    ~1000x smaller than the rest of its tensor (measured: element 15 of the policy's k_proj.bias, sqrt(v) 3e-9 next
    to 1e-5, with PPO-ptx) moves by a visible fraction of lr, and the float32 rounding of its gradient sum (2.5e-4
    of it, ~1e-7 of the tensor's largest gradients: replica sums associate the ptx term differently) shows in it
    at full size. That tensor (16 elements, started at 0, norm 5e-3) then differs by 1.15e-5 of its norm. Every
    other tensor's update agrees to ~3e-7 of its norm. ``init``: {name: array} of the starting weights (0 if
    absent)."""
    from mindrl.models.weights import TensorSource
    wa, wb = TensorSource(str(single_ckpt)), TensorSource(str(par_ckpt))
    assert sorted(wa.names()) == sorted(wb.names()), what
    total_diff = total_update = 0.0
    for name in wa.names():
        x, y = wa.get(name).astype(np.float64), wb.get(name).astype(np.float64)
        update = x - (init[name].astype(np.float64) if name in init else 0.0)
        diff = float(np.linalg.norm(x - y))
        floor = PPO_LR * PPO_OPTIMIZER_STEPS * np.sqrt(x.size)
        assert diff <= 1e-5 * max(float(np.linalg.norm(update)), floor), (what, name, diff, np.linalg.norm(update))
        total_diff, total_update = total_diff + diff ** 2, total_update + float(np.sum(update ** 2))
    assert total_diff ** 0.5 <= 1e-6 * total_update ** 0.5, what  # all tensors together: 1e-6 of the update
    assert total_update ** 0.5 > 1e-3, what  # it did update


def test_ppo_step_infer_tp2_train_dp2_critic_dp2_matches_single_process(grpo_dir, tmp_path):
    """One PPO step (critic from the policy, GAE, KL in the reward, PPO-ptx, 2 mini-batches) under msrun with
    infer tp=2, actor dp=2 and critic dp=2 equals the single-process step: losses, policy and critic weights."""
    from conftest import make_sft_mindrecord
    from mindrl.models.weights import TensorSource
    d = grpo_dir
    sft = make_sft_mindrecord(d) if not (d / "sft.mindrecord").exists() else d / "sft.mindrecord"
    a, b = run_both_ways(d, tmp_path, "ppo", PPO + ["rl_config.pretrain_coef=0.2", f"data.ptx_path={sft}"],
                             PPO_LAYOUTS)
    assert a["critic/score/mean"] == pytest.approx(b["critic/score/mean"], rel=1e-6)   # identical rollouts
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/ptx_loss", "actor/reward_kl_penalty", "critic/vf_loss",
                "critic/grad_norm", "critic/vf_clipfrac", "critic/values/mean", "critic/advantages/max"):
        assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), key
    policy = TensorSource(str(d / "policy"))
    init = {n: policy.get(n) for n in policy.names()}  # the critic: the policy's backbone and a zero value head
    for role in ("policy", "critic"):
        assert_same_update(d / "ppo_single" / "ckpt" / "iter_0000001" / role,
                           d / "ppo_par" / "ckpt" / "iter_0000001" / role, init, role)
    assert float(np.abs(TensorSource(str(d / "ppo_single" / "ckpt" / "iter_0000001" / "critic")).get(
        "score.weight")).max()) > 0  # the zero value head was trained


RM_STATS = {"mean": 0.05, "std": 0.2}


@pytest.fixture(scope="module")
def reward_dir(grpo_dir):
    """A random reward model (HF sequence-classification directory, as `mindrl train-rm` writes it) whose head is
    scaled so that normalised scores vary by about 1 over a rollout, with stored statistics RM_STATS."""
    from mindrl.models.config import load_model_config
    from mindrl.models.lm import build_network
    from mindrl.models.weights import state_numpy
    from mindrl.runtime import setup_context
    from mindrl.trainer.roles.base import export_hf
    from mindrl.trainer.roles.critic import value_model_hf_config
    setup_context("graph")
    cfg = load_model_config(str(grpo_dir / "policy"))
    tensors = state_numpy(build_network(cfg, "reward", seed=5))
    tensors["score.weight"] = tensors["score.weight"] * 10.0
    export_hf(tensors, cfg, str(grpo_dir / "rm"), value_model_hf_config(cfg, 0, RM_STATS),
              os.path.join(ROOT, "examples", "tiny", "tokenizer"))
    return grpo_dir / "rm"


def reference_rm_scores(rm_dir, prompts, responses):
    """transformers' Qwen2 sequence-classification model in float64 on each unpadded prompt + response: the score
    head on the last token's hidden state, normalised with the stored statistics."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForSequenceClassification.from_pretrained(str(rm_dir), dtype=torch.float64).eval()
    out = []
    with torch.no_grad():
        for p, r in zip(prompts, responses):
            ids = torch.tensor([list(p) + list(r)], dtype=torch.int64)
            h = model.model(input_ids=ids).last_hidden_state
            out.append((float(model.score(h)[0, -1, 0]) - RM_STATS["mean"]) / RM_STATS["std"])
    return np.array(out)


def test_ppo_step_scored_by_reward_model_dp2_matches_single_process(grpo_dir, reward_dir, tmp_path):
    """One PPO step scored by a reward model alone (the rule's weight 0; the critic starts from the reward model,
    its values from its one update) under msrun with infer tp=2 and the reward model, actor and critic at dp=2 (tp
    1) equals the single-process step: each rank scores half the rows, and the scores every rank holds equal the single process's and a float64
    transformers reference; the losses and the critic's update equal the single-process ones."""
    d = grpo_dir
    # 40 stop tokens: responses of several lengths, so the score is not always read in the last column
    # one update per step (the other PPO test makes 2): the critic's values come from its update, each replica
    # computing its rows' values, which every rank then holds
    rm = PPO + [f"reward_config.load={reward_dir}", "reward_config.normalize=true",
                "reward_config.micro_batch_size=4", "rl_config.verifier_weight=[0.0]", "rl_config.mini_batch_size=16",
                "generate_config.stop_token_ids=[" + ",".join(map(str, range(100, 140))) + "]"]
    a, b = run_both_ways(d, tmp_path, "ppo_rm", rm, PPO_LAYOUTS + ["reward_config.tensor_model_parallel_size=1"])
    one = json.loads((tmp_path / "single.json.rank0.json").read_text())
    ranks = [json.loads((tmp_path / f"par.json.rank{r}.json").read_text()) for r in (0, 1)]
    assert (one["rm_dp"], one["rm_tp"], one["rm_rows_scored"]) == (1, 1, 16)
    assert len({len(r) for r in one["responses"]}) > 2, "responses of one length: the score's position is untested"
    for r in ranks:  # the reward model's own layout: dp 2, each rank scores its 8 rows
        assert (r["rm_dp"], r["rm_tp"], r["rm_rows_scored"]) == (2, 1, 8)
        assert (r["prompts"], r["responses"]) == (one["prompts"], one["responses"])  # identical rollouts
        np.testing.assert_allclose(r["rm_scores"], one["rm_scores"], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(r["scores"], r["rm_scores"], rtol=1e-6, atol=1e-7)  # the reward model's alone
    want = reference_rm_scores(reward_dir, one["prompts"], one["responses"])
    assert want.std() > 0.3, want  # scores that differ from row to row
    np.testing.assert_allclose(one["rm_scores"], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ranks[0]["rm_scores"], want, rtol=1e-5, atol=1e-5)
    for key in ("reward_model/score/mean", "reward_model/score/min", "reward_model/score/max", "critic/score/mean"):
        assert a[key] == pytest.approx(b[key], rel=1e-6, abs=1e-7), key
    assert a["critic/score/mean"] == pytest.approx(want.mean(), rel=1e-5, abs=1e-6)
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/reward_kl_penalty", "critic/vf_loss", "critic/grad_norm",
                "critic/vf_clipfrac", "critic/values/mean", "critic/advantages/max", "critic/returns/mean"):
        assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), key
    from mindrl.models.weights import TensorSource
    # the critic's update (its values gathered from both replicas): the same weights. The policy's dp update is
    # compared in the test above; after a single Adam step here, each element moves by lr * g / (|g| + eps), so
    # the few whose gradient is at rounding level (the replicas sum it in another order) move differently
    source = TensorSource(str(reward_dir))
    assert_same_update(d / "ppo_rm_single" / "ckpt" / "iter_0000001" / "critic",
                       d / "ppo_rm_par" / "ckpt" / "iter_0000001" / "critic",
                       {n: source.get(n) for n in source.names()}, "critic")


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


TWO_STEPS = ["rl_config.kl_coef=0.05", "rl_config.train_iters=2"]
LORA = ["actor_config.lora_rank=4", "actor_config.lora_alpha=8", "actor_config.lr=1e-2"]


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_grpo_train_tp2_matches_single_process(grpo_dir, tmp_path, lora):
    """The actor at tp=2 for two steps (the second rolls out with the first update's weights) equals the
    single process: metrics (the gradient norm summed over the tp group's shards, counting whole tensors once),
    and the checkpoint. With LoRA: A or B split like its base weight, the other whole, the reference the shared
    frozen base; the adapter and the merged model are compared."""
    d, name = grpo_dir, "lora" if lora else "full"
    over = TWO_STEPS + (LORA if lora else ["actor_config.lr=1e-3"])
    a, b = run_both_ways(d, tmp_path, name, over, ["generate_config.infer_tensor_parallel_size=2",
                                                     "actor_config.tensor_model_parallel_size=2"])
    # step 2's rollouts: the updated weights
    assert a["grpo/score/mean"] == pytest.approx(b["grpo/score/mean"], rel=1e-6)
    assert a["actor/kl_loss"] > 0  # the first update moved the policy away from the reference
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/kl_loss"):
        assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), key
    from mindrl.models.safetensors_io import SafetensorsFile
    from mindrl.models.weights import TensorSource
    for rel in ("policy/adapter/adapter_model.safetensors", "policy") if lora else ("policy",):
        x_src = d / f"{name}_single" / "ckpt" / "iter_0000002" / rel
        y_src = d / f"{name}_par" / "ckpt" / "iter_0000002" / rel
        x, y = (SafetensorsFile(str(x_src)), SafetensorsFile(str(y_src))) if rel.endswith("safetensors") else \
            (TensorSource(str(x_src)), TensorSource(str(y_src)))
        tensors = list(x.keys()) if hasattr(x, "keys") else x.names()
        assert len(tensors) > 0
        for t in tensors:
            u, v = x.get(t), y.get(t)
            assert np.linalg.norm(u - v) <= 1e-5 * max(np.linalg.norm(u), 1e-3), (rel, t)
    base = TensorSource(str(d / "policy"))
    merged = TensorSource(str(d / f"{name}_par" / "ckpt" / "iter_0000002" / "policy"))
    q = "model.layers.0.self_attn.q_proj.weight"
    assert np.abs(merged.get(q) - base.get(q)).max() > 1e-4  # it updated (with LoRA: the export is merged)
