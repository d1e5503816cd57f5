"""Activation recompute (MindFormers' recompute_config.recompute): read from the model yaml, refused where mindrl
cannot do what a key asks, part of the compile-cache key, and the same loss and gradients as without it."""
import os

import numpy as np
import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "model_configs", "tiny_qwen2.yaml")


def _yaml_with(tmp_path, section):
    doc = yaml.safe_load(open(TINY))
    doc["recompute_config"] = section
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


@pytest.mark.parametrize("section, layers", [({"recompute": True}, "all"), ({"recompute": False}, 0),
                                             ({"recompute": 1}, 1), ({"recompute": [1]}, 1),
                                             ({"recompute": True, "mp_comm_recompute": True,
                                               "select_recompute": False}, "all")])
def test_recompute_is_read_from_the_model_yaml(tmp_path, section, layers):
    from mindrl.models.config import load_model_config
    cfg = load_model_config(_yaml_with(tmp_path, section))
    assert cfg.recompute_layers() == (cfg.num_layers if layers == "all" else layers)
    again = tmp_path / "again.yaml"
    again.write_text(yaml.safe_dump(cfg.to_yaml_dict()))
    assert load_model_config(str(again)).recompute_layers() == cfg.recompute_layers()


@pytest.mark.parametrize("section, words", [
    ({"recompute": True, "select_recompute": True}, "recompute_config.select_recompute: True is not supported"),
    ({"recompute": True, "recompute_slice_activation": True}, "recompute_config.recompute_slice_activation"),
    ({"recompute": [1, 1]}, "lists 2 pipeline stages"),
    ({"recompute": 99}, "recompute_config.recompute: must be true, false or a layer count"),
    ({"recompute": True, "recompute_everything": True}, "recompute_config.recompute_everything: unknown key"),
])
def test_recompute_settings_mindrl_cannot_honour_are_refused(tmp_path, section, words):
    from mindrl.models.config import ModelConfigError, load_model_config
    with pytest.raises(ModelConfigError, match=words.replace("[", r"\[")):
        load_model_config(_yaml_with(tmp_path, section))


def test_recompute_changes_the_compile_cache_key(tmp_path):
    from types import SimpleNamespace
    from mindrl.config import load_train_config
    from mindrl.trainer.compile_cache import compile_cache_dir
    topo = SimpleNamespace(world=1, rank=0)
    keys = []
    for section in ({"recompute": False}, {"recompute": True}):
        cfg = load_train_config(os.path.join(ROOT, "examples", "grpo", "tiny_math.yaml"),
                                [f"actor_config.model={_yaml_with(tmp_path, section)}"], check_paths=False)
        keys.append(compile_cache_dir(cfg, topo))
    assert keys[0] != keys[1]


def _loss_and_grads(recompute: bool):
    import mindspore as ms
    from mindspore import Tensor, nn, ops
    from mindrl.models.config import ModelConfig
    from mindrl.models.lm import build_network
    from mindrl.runtime import setup_context
    setup_context("graph")
    cfg = ModelConfig(model_type="qwen2", vocab_size=97, hidden_size=32, intermediate_size=48, num_layers=3,
                      num_heads=4, n_kv_heads=2, max_position_embeddings=64, qkv_bias=True,
                      recompute=2 if recompute else False).validate()
    from mindrl.models.decoder import recomputed_layers, recomputing
    lm = build_network(cfg, seed=5)
    layers = recomputed_layers(lm)
    # the first two layers run through a block of their own, marked for recompute; the third through the plain one
    assert lm.model.n_recompute == (2 if recompute else 0)
    assert layers == ([lm.model.recompute_block] if recompute else [])

    def scopes():  # MindSpore's graph-mode marks: on while a training graph compiles, off for any other graph
        return {(getattr(c, "_scope", None) or "").startswith("recompute_") for layer in layers
                for _, c in layer.cells_and_names()}

    class Loss(nn.Cell):
        def __init__(self):
            super().__init__(auto_prefix=False)
            self.lm = lm

        def construct(self, ids, mask):
            logits = self.lm(ids, mask)
            return ops.log_softmax(logits, -1)[:, :, 3].sum() + (logits * logits).mean()

    rng = np.random.default_rng(0)
    ids = Tensor(rng.integers(0, 97, (2, 16)).astype(np.int32))
    mask = np.ones((2, 16), np.int32)
    mask[1, :5] = 0
    params = lm.trainable_params()
    step = ms.value_and_grad(Loss(), None, params)
    if recompute:
        assert scopes() == {False}
    with recomputing(layers):
        if recompute:
            assert scopes() == {True}
        loss, grads = step(ids, Tensor(mask))
    assert not recompute or scopes() == {False}
    return float(loss.asnumpy()), [g.asnumpy() for g in grads]


def test_recomputed_layers_give_the_same_loss_and_gradients():
    plain_loss, plain = _loss_and_grads(False)
    loss, grads = _loss_and_grads(True)
    assert loss == plain_loss
    assert all(np.array_equal(a, b) for a, b in zip(plain, grads))
    assert any(np.abs(g).max() > 0 for g in grads)


# -- Megatron's keys in the training config (MindSpeed-RL's and MindSpeed-LLM's spelling) ----------------------------

GRPO = os.path.join(ROOT, "examples", "grpo", "tiny_math.yaml")
POLICY = os.path.join(ROOT, "examples", "tiny", "policy")  # 2 layers


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    from conftest import make_grpo_workdir
    return make_grpo_workdir(tmp_path_factory.mktemp("recompute"))


def _settings(workdir, *overrides):
    """The tests' small PPO run (a critic) on the 2-layer example policy, then ``overrides``."""
    from conftest import as_overrides, tiny_run_settings
    return as_overrides(tiny_run_settings(workdir, workdir / "logs", **{
        "actor_config.model": POLICY, "actor_config.load": POLICY, "rl_config.train_iters": 4})) + list(overrides)


def _ppo(workdir, *overrides):
    from mindrl.config import load_train_config
    return load_train_config(os.path.join(ROOT, "examples", "ppo", "tiny_math.yaml"), _settings(workdir, *overrides))


def _recompute(section, granularity="full", method=None, layers=None):
    out = [f"{section}.recompute_granularity={granularity}"]
    out += [f"{section}.recompute_method={method}"] if method else []
    return out + ([f"{section}.recompute_num_layers={layers}"] if layers else [])


def _marked(net) -> int:
    """How many layers run through the block marked for recompute (one block serves them all)."""
    marked = [c for _, c in net.cells_and_names() if getattr(c, "_recompute_cell", None) is not None]
    assert marked in ([], [net.model.recompute_block])
    return net.model.n_recompute


@pytest.mark.parametrize("method, layers, expected", [("block", 1, 1), ("uniform", 1, 2), ("uniform", 2, 2)])
def test_megatron_keys_recompute_the_trained_networks_layers(workdir, method, layers, expected):
    """block N: the first N layers; uniform: every layer. The policy's and the critic's networks are built with it
    (the roles build from the plan's model spec), the reference's is not; the plan says so."""
    from mindrl.config.plan import plan_run
    from mindrl.models.lm import build_network
    from mindrl.runtime import setup_context
    setup_context("graph")
    cfg = _ppo(workdir, *_recompute("actor_config", "full", method, layers),
               *_recompute("critic_config", "full", "block", 1), "rl_config.kl_coef=0.1")
    roles = plan_run(cfg, 1).roles
    policy = roles["policy"].model.load()
    assert policy.num_layers == 2 and policy.recompute_layers() == expected
    assert roles["critic"].model.load().recompute_layers() == 1
    assert roles["reference"].model.load().recompute_layers() == 0
    assert _marked(build_network(policy, seed=1)) == expected
    words = "every layer" if method == "uniform" else f"the first {expected} layers"
    assert f"recomputing {words} in the backward" in roles["policy"].text()
    assert "recomputing the first 1 layers in the backward" in roles["critic"].text()
    assert "recomputing" not in roles["reference"].text()


def test_megatron_keys_win_over_the_model_yaml_and_are_part_of_the_compile_cache_key(tmp_path):
    from types import SimpleNamespace
    from mindrl.config import load_train_config
    from mindrl.config.plan import plan_run
    from mindrl.trainer.compile_cache import compile_cache_dir
    base = [f"actor_config.model={_yaml_with(tmp_path, {'recompute': True})}"]
    cfg = load_train_config(GRPO, base + _recompute("actor_config", "full", "block", 1), check_paths=False)
    assert plan_run(cfg, 1).roles["policy"].model.load().recompute_layers() == 1
    plain = load_train_config(GRPO, base, check_paths=False)
    assert plan_run(plain, 1).roles["policy"].model.load().recompute_layers() == 2  # the yaml's: every layer
    topo = SimpleNamespace(world=1, rank=0)
    assert compile_cache_dir(cfg, topo) != compile_cache_dir(plain, topo)


@pytest.mark.parametrize("overrides, words", [
    (_recompute("actor_config", "selective"), "actor_config.recompute_granularity: selective is not supported"),
    (_recompute("actor_config", "full", layers=1), "actor_config.recompute_method: is required"),
    (_recompute("actor_config", "full", "block"), "actor_config.recompute_num_layers: is required"),
    (["actor_config.recompute_method=block"], "actor_config.recompute_method: 'block' has no effect"),
    (["critic_config.recompute_num_layers=1"], "critic_config.recompute_num_layers: 1 has no effect"),
    (_recompute("actor_config", "full", "block", 3), "actor_config.recompute_num_layers: 3 is more than the 2 layers"),
    (_recompute("critic_config", "full", "uniform", 3), "critic_config.recompute_num_layers: 3 is more than the 2"),
    (["actor_config.recompute_granularity=all"], "actor_config.recompute_granularity: invalid value"),
])
def test_megatron_recompute_keys_mindrl_cannot_honour_are_refused_before_compute(workdir, overrides, words):
    """`mindrl plan` (no graph compiled): exit status 2 and the key named, where Megatron's own checks refuse too."""
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-m", "mindrl.cli", "plan", "--config",
                           os.path.join(ROOT, "examples", "ppo", "tiny_math.yaml"), *_settings(workdir, *overrides)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert words in proc.stderr, proc.stderr[-2000:]


def test_mindspeed_rl_recompute_keys_mean_what_megatron_means(tmp_path):
    """In a MindSpeed-RL file: megatron_training's keys reach the actor, the role's own section wins."""
    import shutil
    from mindrl.config import ConfigError, load_train_config
    from mindrl.config.plan import plan_run
    shutil.copytree(os.path.join(ROOT, "examples", "mindspeed_rl"), tmp_path / "cfg")
    path = tmp_path / "cfg" / "grpo_tiny_math.yaml"
    doc = yaml.safe_load(path.read_text())

    def load(**actor):
        doc["actor_config"].update(actor)
        path.write_text(yaml.safe_dump(doc))
        return load_train_config(str(path), check_paths=False)
    doc["megatron_training"].update(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    cfg = load()
    assert (cfg.actor_config.recompute_granularity, cfg.actor_config.recompute_method,
            cfg.actor_config.recompute_num_layers) == ("full", "uniform", 1)
    policy = plan_run(cfg, 1).roles["policy"].model.load()
    assert policy.recompute_layers() == policy.num_layers == 2
    assert plan_run(load(recompute_method="block"), 1).roles["policy"].model.load().recompute_layers() == 1
    with pytest.raises(ConfigError, match="selective is not supported"):
        load(recompute_granularity="selective", recompute_method=None, recompute_num_layers=None)
