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
    lm = build_network(cfg, seed=5)
    assert sum(1 for _, c in lm.cells_and_names() if getattr(c, "_recompute_cell", None) is not None) == \
        (2 if recompute else 0)  # the first two layers are marked

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
    loss, grads = step(ids, Tensor(mask))
    return float(loss.asnumpy()), [g.asnumpy() for g in grads]


def test_recomputed_layers_give_the_same_loss_and_gradients():
    plain_loss, plain = _loss_and_grads(False)
    loss, grads = _loss_and_grads(True)
    assert loss == plain_loss
    assert all(np.array_equal(a, b) for a, b in zip(plain, grads))
    assert any(np.abs(g).max() > 0 for g in grads)
