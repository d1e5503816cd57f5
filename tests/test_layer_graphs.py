"""actor_config.layer_graphs: a micro-batch's forward and backward one decoder layer per graph call
(trainer/layer_graphs.py) gives AccumulateGrad's loss, metrics and accumulated gradients; the forward-only passes
run that way (log-probs, values, reward scores) give the whole graph's outputs; RL steps with them match steps
without; the keys they cannot work with are refused before compute."""
import os

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _arrays(rng, rows, prompt, response, vocab, group):
    from mindrl.trainer.actor_graphs import pack_arrays
    prompts = rng.integers(1, vocab, (rows // max(group, 1), prompt)).repeat(max(group, 1), 0)
    ids = np.concatenate([prompts, rng.integers(1, vocab, (rows, response))], 1).astype(np.int32)
    mask = np.ones_like(ids)
    mask[:max(group, 1), :2] = 0      # a left-padded prompt (every row of its group)
    mask[1, -2:] = 0                  # a response that ended early
    arrays = {"input_ids": ids, "attention_mask": mask, "loss_mask": mask[:, prompt:].astype(np.float32),
              "old_log_probs": rng.normal(-3, 0.1, (rows, response)).astype(np.float32),
              "advantages": rng.normal(0, 1, (rows, response)).astype(np.float32),
              "ref_log_probs": rng.normal(-3, 0.1, (rows, response)).astype(np.float32)}
    return pack_arrays(arrays, group) if group else arrays


@pytest.mark.parametrize("model_type, tied, group", [("llama", True, 0), ("qwen2", False, 2), ("qwen3", False, 0)])
def test_layer_graphs_accumulate_the_whole_graphs_gradients(model_type, tied, group):
    """Two micro-batches accumulated (so the buffers add), a KL and an entropy term in the loss: the same outputs
    and the same gradient for every weight as the one-graph AccumulateGrad, with Qwen2's biases, Qwen3's q/k norms,
    a tied and an untied head, one row per response and shared prompts. A weight set anew after the graphs were
    built (as a checkpoint load does, with set_data) is the one they compute with."""
    from mindspore import Tensor
    from mindrl.algorithms.losses import ActorLoss
    from mindrl.models.config import ModelConfig
    from mindrl.models.lm import build_network
    from mindrl.runtime import setup_context
    from mindrl.trainer.actor_graphs import ActorLossCell
    from mindrl.trainer.layer_graphs import LayerGraphsAccumulateGrad
    from mindrl.trainer.updater import AccumulateGrad
    setup_context("graph")
    cfg = ModelConfig(model_type=model_type, vocab_size=97, hidden_size=32, intermediate_size=48, num_layers=3,
                      num_heads=4, n_kv_heads=2, max_position_embeddings=64, qkv_bias=model_type == "qwen2",
                      qk_norm=model_type == "qwen3", tie_word_embeddings=tied).validate()
    rng = np.random.default_rng(0)
    batches = [_arrays(rng, 4, 6, 5, 97, group) for _ in range(2)]
    got = {}
    for cls in (AccumulateGrad, LayerGraphsAccumulateGrad):
        net = build_network(cfg, seed=3)
        cell = ActorLossCell(net, ActorLoss(use_kl_in_loss=True, kl_coef=0.1, entropy_coeff=0.01), 0.7, True, group)
        acc = cls(cell, net.trainable_params())
        weight = net.model.layers[1].mlp.down_proj.weight
        weight.set_data(Tensor(weight.asnumpy() * 3.0))
        outs = [acc.run(arrays, 11.0) for arrays in batches]
        got[cls.__name__] = outs, {p.name: b.asnumpy().copy() for p, b in zip(acc.params, acc.accum)}
    (outs_w, grads_w), (outs_l, grads_l) = got["AccumulateGrad"], got["LayerGraphsAccumulateGrad"]
    for a, b in zip(outs_w, outs_l):
        np.testing.assert_allclose(np.array(b, np.float64), np.array(a, np.float64), rtol=1e-6, atol=1e-7)
    assert grads_w.keys() == grads_l.keys()
    for name, g in grads_w.items():
        assert np.abs(g).max() > 0, name  # every weight gets a gradient, so a missing one would show
        np.testing.assert_allclose(grads_l[name], g, rtol=1e-5, atol=1e-6 * np.abs(g).max(), err_msg=name)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    from conftest import make_grpo_workdir
    return make_grpo_workdir(tmp_path_factory.mktemp("layer_graphs"))


BASE = {"rl_config.train_iters": 2, "rl_config.global_batch_size": 4, "rl_config.mini_batch_size": 2,
        "rl_config.micro_batch_size": 4, "rl_config.kl_coef": 0.05, "rl_config.use_kl_in_loss": "true",
        "rl_config.shuffle_minibatch": "false", "actor_config.model": os.path.join(ROOT, "examples", "tiny", "policy"),
        "actor_config.load": os.path.join(ROOT, "examples", "tiny", "policy")}



@pytest.mark.parametrize("overrides, words", [
    (["actor_config.tensor_model_parallel_size=2"], "actor_config.tensor_model_parallel_size: not with "
                                                    "actor_config.layer_graphs"),
    (["actor_config.lora_rank=4"], "actor_config.lora_rank: not with actor_config.layer_graphs"),
    (["actor_config.recompute_granularity=full", "actor_config.recompute_method=uniform",
      "actor_config.recompute_num_layers=1"], "actor_config.recompute_granularity: not with actor_config.layer_graphs"),
    (["actor_config.model=" + os.path.join(ROOT, "model_configs", "tiny_qwen2.yaml")], None),
])
def test_what_layer_graphs_cannot_work_with_is_refused_before_compute(workdir, tmp_path, overrides, words):
    """`mindrl plan` (no graph compiled): exit status 2 and the key named. A model yaml that recomputes its layers
    (recompute_config) is refused too, naming actor_config.layer_graphs."""
    import subprocess
    import sys
    import yaml
    from conftest import as_overrides, tiny_run_settings
    if words is None:
        doc = yaml.safe_load(open(overrides[0].split("=", 1)[1]))
        doc["recompute_config"] = {"recompute": True}
        (tmp_path / "model.yaml").write_text(yaml.safe_dump(doc))
        overrides = [f"actor_config.model={tmp_path / 'model.yaml'}"]
        words = "actor_config.layer_graphs: the model"
    settings = as_overrides(tiny_run_settings(workdir, tmp_path / "logs")) + ["actor_config.layer_graphs=true"]
    proc = subprocess.run([sys.executable, "-m", "mindrl.cli", "plan", "--config",
                           os.path.join(ROOT, "examples", "grpo", "tiny_math.yaml"), *settings, *overrides],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert words in proc.stderr, proc.stderr[-2000:]


def test_layer_graphs_change_the_compile_cache_key():
    from types import SimpleNamespace
    from mindrl.config import load_train_config
    from mindrl.trainer.compile_cache import compile_cache_dir
    topo = SimpleNamespace(world=1, rank=0)
    keys = {compile_cache_dir(load_train_config(os.path.join(ROOT, "examples", "grpo", "tiny_math.yaml"),
                                                [f"actor_config.layer_graphs={v}"], check_paths=False), topo)
            for v in ("true", "false")}
    assert len(keys) == 2


@pytest.mark.parametrize("with_values", [False, True])
def test_critic_layer_graphs_accumulate_the_whole_graphs_gradients(with_values):
    """The critic's loss cells (the clipped value loss; and with the values and GAE's returns from the same
    forward): the same outputs, values included, and gradients as AccumulateGrad."""
    from mindrl.models.config import ModelConfig
    from mindrl.models.lm import build_network
    from mindrl.runtime import setup_context
    from mindrl.trainer.critic_graphs import CriticLossCell, CriticValuesLossCell
    from mindrl.trainer.layer_graphs import LayerGraphsAccumulateGrad
    from mindrl.trainer.updater import AccumulateGrad
    setup_context("graph")
    cfg = ModelConfig(model_type="qwen2", vocab_size=97, hidden_size=32, intermediate_size=48, num_layers=3,
                      num_heads=4, n_kv_heads=2, max_position_embeddings=64, qkv_bias=True).validate()
    rng = np.random.default_rng(1)
    base = _arrays(rng, 4, 6, 5, 97, 0)
    arrays = {k: base[k] for k in ("input_ids", "attention_mask", "loss_mask")}
    if with_values:
        arrays["token_rewards"] = rng.normal(0, 1, (4, 5)).astype(np.float32)
    else:
        arrays["old_values"] = rng.normal(0, 0.1, (4, 5)).astype(np.float32)
        arrays["returns"] = rng.normal(0, 1, (4, 5)).astype(np.float32)
    got = {}
    for cls in (AccumulateGrad, LayerGraphsAccumulateGrad):
        net = build_network(cfg, "value", seed=4)
        cell = CriticValuesLossCell(net, 0.2, "token-mean", 0.99, 0.95) if with_values else \
            CriticLossCell(net, 0.2, "token-mean")
        acc = cls(cell, net.trainable_params())
        got[cls.__name__] = acc.run(arrays, 9.0), {p.name: b.asnumpy().copy() for p, b in zip(acc.params, acc.accum)}
    (outs_w, grads_w), (outs_l, grads_l) = got["AccumulateGrad"], got["LayerGraphsAccumulateGrad"]
    assert len(outs_w) == len(outs_l) == (5 if with_values else 4)
    for a, b in zip(outs_w, outs_l):
        np.testing.assert_allclose(np.asarray(b, np.float64), np.asarray(a, np.float64), rtol=1e-6, atol=1e-7)
    for name, g in grads_w.items():
        assert np.abs(g).max() > 0, name
        np.testing.assert_allclose(grads_l[name], g, rtol=1e-5, atol=1e-6 * np.abs(g).max(), err_msg=name)


@pytest.mark.parametrize("kind, model_type, group", [("log_probs", "llama", 0), ("log_probs", "qwen2", 2),
                                                      ("values", "qwen3", 0), ("reward", "qwen2", 0)])
def test_scoring_one_layer_per_graph_gives_the_whole_graphs_outputs(kind, model_type, group):
    """The forward-only passes (the log-probs and entropies of ResponseLogProbs, and of SharedPromptLogProbs over
    packed groups; ResponseValues; the reward model's scores) as LayerGraphsScorer: the outputs of the cell's one
    graph, after compile() for the same shapes, with a weight set anew after the scorer was built."""
    from mindspore import Tensor
    from mindrl.models.config import ModelConfig
    from mindrl.models.lm import build_network
    from mindrl.runtime import setup_context
    from mindrl.trainer.actor_graphs import log_prob_scorer
    from mindrl.trainer.critic_graphs import ResponseValues
    from mindrl.trainer.inputs import input_names, tensors
    from mindrl.trainer.layer_graphs import LayerGraphsScorer
    setup_context("graph")
    cfg = ModelConfig(model_type=model_type, vocab_size=97, hidden_size=32, intermediate_size=48, num_layers=3,
                      num_heads=4, n_kv_heads=2, max_position_embeddings=64, qkv_bias=model_type == "qwen2",
                      qk_norm=model_type == "qwen3", tie_word_embeddings=model_type == "llama").validate()
    net = build_network(cfg, {"log_probs": "causal_lm", "values": "value", "reward": "reward"}[kind], seed=5)
    cell = {"log_probs": lambda: log_prob_scorer(net, 0.7, group), "values": lambda: ResponseValues(net),
            "reward": lambda: net}[kind]()
    scorer = LayerGraphsScorer(cell, net.model)
    assert input_names(scorer) == input_names(cell)
    weight = net.model.layers[2].self_attn.o_proj.weight
    weight.set_data(Tensor(weight.asnumpy() * 2.0))
    arrays = _arrays(np.random.default_rng(2), 4, 6, 5, 97, group)
    arrays["response_mask"] = arrays["loss_mask"]
    inputs = tensors(input_names(cell), {n: arrays[n] for n in input_names(cell)})
    scorer.compile(*inputs)
    got, want = scorer(*inputs), cell(*inputs)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert np.abs(b.asnumpy()).max() > 0
        np.testing.assert_allclose(a.asnumpy(), b.asnumpy(), rtol=1e-5, atol=1e-6)


def test_ppo_steps_with_layer_graphs_everywhere_match_the_whole_graphs(workdir, tmp_path):
    """A PPO step of two updates (so the policy's old log-probs and the critic's values are passes of their own),
    with a reference, a critic and a reward model, with layer graphs on all of them and on none: the same rollouts,
    rewards, critic and actor metrics, and weights."""
    from conftest import as_overrides, assert_same_steps, steps_and_weights, tiny_run_settings
    from mindrl.config import load_train_config
    from mindrl.models.config import load_model_config
    from mindrl.models.lm import build_network
    from mindrl.models.weights import state_numpy
    from mindrl.runtime import setup_context
    from mindrl.trainer import RLTrainer
    from mindrl.trainer.roles.base import export_hf
    from mindrl.trainer.roles.critic import value_model_hf_config
    setup_context("graph")
    policy = os.path.join(ROOT, "examples", "tiny", "policy")
    cfg = load_model_config(policy)
    rm = tmp_path / "rm"
    export_hf(state_numpy(build_network(cfg, "reward", seed=9)), cfg, str(rm), value_model_hf_config(cfg, 0),
              os.path.join(ROOT, "examples", "tiny", "tokenizer"))
    out = {}
    for layers in ("true", "false"):
        settings = tiny_run_settings(workdir, workdir / f"ppo{layers}" / "logs", **{
            **BASE, "reward_config.load": str(rm), "reward_config.normalize": "false", "rl_config.critic_warmup": 0,
            "rl_config.use_kl_in_reward": "false", "critic_config.load": policy, "actor_config.layer_graphs": layers,
            "critic_config.layer_graphs": layers, "reward_config.layer_graphs": layers})
        t = RLTrainer(load_train_config(os.path.join(ROOT, "examples", "ppo", "tiny_math_rm.yaml"),
                                        as_overrides(settings)))
        on = layers == "true"
        assert not t.critic.values_in_update
        for role in (t.policy.scorer, t.reference.scorer, t.critic.values_cell, t.reward_model.scorer):
            assert (type(role).__name__ == "LayerGraphsScorer") == on
        assert ("the update and scoring one layer per graph" in t.run.plan.roles["policy"].text()) == on
        assert ("the update and scoring one layer per graph" in t.run.plan.roles["critic"].text()) == on
        for role in ("reference", "reward_model"):
            assert ("scoring one layer per graph" in t.run.plan.roles[role].text()) == on
        for role in (t.policy, t.critic):
            assert type(role.updater.accumulate).__name__ == ("LayerGraphsAccumulateGrad" if on else "AccumulateGrad")
        metrics, weights = steps_and_weights(t, steps=1)
        weights.update({n: p.asnumpy().copy() for n, p in t.critic.net.parameters_and_names()})
        out[layers] = metrics, weights
    assert_same_steps(out["true"], out["false"])
    for a, b in zip(out["true"][0], out["false"][0]):
        for k in ("critic/vf_loss", "critic/values/mean", "critic/rewards/mean"):
            assert a[k] == pytest.approx(b[k], rel=2e-4, abs=1e-6), k


def test_reward_model_layer_graphs_with_tensor_parallelism_is_refused():
    """reward_config.layer_graphs builds one device per model: with the reward model's tensor parallelism the
    config is refused at load, naming the key."""
    from mindrl.config import ConfigError, load_train_config
    path = os.path.join(ROOT, "examples", "ppo", "tiny_math_rm.yaml")
    with pytest.raises(ConfigError, match=r"reward_config\.tensor_model_parallel_size: not with "
                                          r"reward_config\.layer_graphs"):
        load_train_config(path, ["reward_config.layer_graphs=true", "reward_config.tensor_model_parallel_size=2"],
                          check_paths=False)
    assert load_train_config(path, ["reward_config.layer_graphs=true"], check_paths=False).reward_config.layer_graphs
