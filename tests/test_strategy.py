"""Strategy files + per-rank checkpoints round-trip through MindSpore's own transform_checkpoints.

Everything runs in one process: transform_checkpoints needs no init() and no collectives.
"""
import json
import os

import numpy as np
import pytest

from mindrl.models.config import ModelConfig
from mindrl.parallel.strategy import (StrategyError, merge_rank_checkpoints, rank_checkpoint_path,
                                      save_rank_checkpoint, shard_state, strategy_json, write_strategy_files)

COLUMN = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "lm_head", "embed_tokens")
ROW = ("o_proj", "down_proj")


def tiny_config(**overrides):
    base = dict(model_type="qwen2", vocab_size=64, hidden_size=16, intermediate_size=32, num_layers=2, num_heads=4,
                n_kv_heads=2, max_position_embeddings=32, qkv_bias=True, tie_word_embeddings=False)
    base.update(overrides)
    return ModelConfig(**base).validate()


def axis_for(name):
    """The column/row rule: column-parallel weights and biases split axis 0, row-parallel weights axis 1."""
    if any(f"{c}." in name or name.startswith(f"{c}.") for c in COLUMN):
        return 0
    if any(f"{r}.weight" in name for r in ROW):
        return 1
    return None


@pytest.fixture(scope="module")
def model_axes():
    """{name: (full shape, split axis)} taken from a single-process network's parameters."""
    from mindrl.models.lm import build_network
    from mindrl.models.weights import state_numpy
    net = build_network(tiny_config())  # shapes in the external (HF) orientation that files use
    return {name: (tuple(a.shape), axis_for(name)) for name, a in state_numpy(net).items()}


def full_state(axes, seed=0, step=7.0):
    rng = np.random.default_rng(seed)
    state = {}
    for name, (shape, _) in axes.items():
        state[name] = rng.standard_normal(shape).astype(np.float32)
        state[f"adam_m.{name}"] = rng.standard_normal(shape).astype(np.float32)
        state[f"adam_v.{name}"] = rng.random(shape).astype(np.float32)
    state["global_step"] = np.array(step, np.float32)
    return state


def write_sharded(tmp, axes, state, dp, tp, tag):
    ckpt_dir = os.path.join(tmp, f"ckpt_{tag}")
    strategy_dir = os.path.join(tmp, "strategy", f"train_{tag}_strategy")
    paths = write_strategy_files(strategy_dir, axes, dp, tp, dp * tp)
    for rank in range(dp * tp):
        save_rank_checkpoint(ckpt_dir, rank, shard_state(state, axes, dp, tp, rank))
    return ckpt_dir, paths


def load_numpy(path):
    import mindspore as ms
    return {name: p.asnumpy() for name, p in ms.load_checkpoint(path).items()}


# --- schema -------------------------------------------------------------------------------------

def test_schema_lists_every_parameter_and_moment(model_axes):
    doc = strategy_json(model_axes, dp=2, tp=2)
    assert doc["current_stage"] == 0 and doc["parallel_strategy_item"] == {}
    items = doc["parallel_layout_item"]
    expected = set(model_axes) | {f"adam_m.{n}" for n in model_axes} | {f"adam_v.{n}" for n in model_axes}
    assert set(items) == expected | {"global_step"}
    for item in items.values():
        assert item["dev_matrix"] == [2, 2]
        for key in ("field", "opt_weight_shard_step", "opt_weight_shard_size"):
            assert item[key] == 0
        assert item["param_split_shape"] == [] and item["indices_offset"] == []
    assert items["model.layers.0.self_attn.q_proj.weight"]["tensor_map"] == [0, -1]
    assert items["model.layers.0.self_attn.q_proj.bias"]["tensor_map"] == [0]
    assert items["model.layers.1.mlp.down_proj.weight"]["tensor_map"] == [-1, 0]
    assert items["adam_v.model.layers.1.self_attn.o_proj.weight"]["tensor_map"] == [-1, 0]
    assert items["model.embed_tokens.weight"]["tensor_map"] == [0, -1]
    assert items["lm_head.weight"]["tensor_map"] == [0, -1]
    assert items["model.norm.weight"]["tensor_map"] == [-1]
    assert items["global_step"]["tensor_map"] == [-1]  # a scalar is stored as shape (1,) in a .ckpt
    assert set(strategy_json(model_axes, 1, 2, include_optimizer=False)["parallel_layout_item"]) == set(model_axes)


def test_strategy_files_per_rank_and_errors(tmp_path, model_axes):
    paths = write_strategy_files(str(tmp_path / "infer_policy_strategy"), model_axes, 2, 2, 4)
    assert [os.path.basename(p) for p in paths] == [f"strategy_{r}.json" for r in range(4)]
    docs = [json.load(open(p)) for p in paths]
    assert all(d == docs[0] for d in docs)
    assert not [f for f in os.listdir(tmp_path / "infer_policy_strategy") if f.endswith(".tmp")]
    with pytest.raises(StrategyError, match="world size 3"):
        write_strategy_files(str(tmp_path / "bad"), model_axes, 2, 2, 3)
    with pytest.raises(StrategyError, match="not divisible"):
        strategy_json({"w": ((5, 4), 0)}, 1, 2)
    with pytest.raises(StrategyError, match="'-'"):
        strategy_json({"a-b": ((4,), None)}, 1, 2)


def test_shard_state_slices(model_axes):
    state = full_state(model_axes)
    shard = shard_state(state, model_axes, dp=2, tp=2, rank=3)  # tp_rank 1
    q = "model.layers.0.self_attn.q_proj.weight"
    o = "model.layers.0.self_attn.o_proj.weight"
    np.testing.assert_array_equal(shard[q], state[q][8:])
    np.testing.assert_array_equal(shard[f"adam_m.{o}"], state[f"adam_m.{o}"][:, 8:])
    np.testing.assert_array_equal(shard["model.norm.weight"], state["model.norm.weight"])
    assert shard["global_step"] == 7.0


# --- merge and split with MindSpore's transform_checkpoints ---------------------------------------

@pytest.mark.parametrize("dp,tp", [(1, 2), (2, 2)])
def test_merge_to_full_is_exact(tmp_path, model_axes, dp, tp):
    state = full_state(model_axes, seed=dp * 10 + tp)
    ckpt_dir, strategies = write_sharded(str(tmp_path), model_axes, state, dp, tp, f"dp{dp}tp{tp}")
    merged_path = merge_rank_checkpoints(ckpt_dir, strategies[0], str(tmp_path / "merged"))
    assert merged_path == str(tmp_path / "merged" / "rank_0" / "checkpoint_0.ckpt")
    merged = load_numpy(merged_path)
    assert set(merged) == set(state)
    for name, value in state.items():
        if name == "global_step":
            assert merged[name].reshape(()) == value  # comes back as shape (1,)
            continue
        assert merged[name].shape == value.shape, name
        np.testing.assert_array_equal(merged[name], value, err_msg=name)


def test_split_2_to_4(tmp_path, model_axes):
    state = full_state(model_axes, seed=3)
    ckpt_dir, src = write_sharded(str(tmp_path), model_axes, state, 1, 2, "src")
    dst = write_strategy_files(str(tmp_path / "strategy" / "dst"), model_axes, 1, 4, 4)
    out = merge_rank_checkpoints(ckpt_dir, src[0], str(tmp_path / "split"), dst_strategy_file=dst[0])
    for rank in (0, 2):
        got = load_numpy(os.path.join(out, f"rank_{rank}", f"checkpoint_{rank}.ckpt"))
        want = shard_state(state, model_axes, 1, 4, rank)
        for name in ("model.layers.1.mlp.up_proj.weight", "adam_m.model.layers.0.mlp.down_proj.weight",
                     "model.layers.0.self_attn.k_proj.bias", "lm_head.weight", "model.norm.weight"):
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"rank {rank} {name}")


def test_missing_rank_names_directory(tmp_path, model_axes):
    state = full_state(model_axes)
    ckpt_dir, strategies = write_sharded(str(tmp_path), model_axes, state, 1, 2, "miss")
    os.remove(rank_checkpoint_path(ckpt_dir, 1))
    with pytest.raises(StrategyError) as err:
        merge_rank_checkpoints(ckpt_dir, strategies[0], str(tmp_path / "merged"))
    assert ckpt_dir in str(err.value) and "[1]" in str(err.value)


def test_dp_replicas_are_optional(tmp_path, model_axes):
    """With dp=2 the second replica's ranks (2, 3) hold the same slices and are not needed."""
    state = full_state(model_axes, seed=4)
    ckpt_dir, strategies = write_sharded(str(tmp_path), model_axes, state, 2, 2, "dp")
    for rank in (2, 3):
        os.remove(rank_checkpoint_path(ckpt_dir, rank))
    merged = load_numpy(merge_rank_checkpoints(ckpt_dir, strategies[0], str(tmp_path / "merged")))
    name = "adam_v.model.layers.1.mlp.gate_proj.weight"
    np.testing.assert_array_equal(merged[name], state[name])


# --- the merged checkpoint in a real model ---------------------------------------------------------

def test_merged_checkpoint_loads_into_model(tmp_path, model_axes):
    import yaml
    import mindrl
    from mindrl.models.weights import save_ms_checkpoint

    cfg = tiny_config()
    cfg_path = tmp_path / "tiny.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg.to_yaml_dict()))
    state = full_state(model_axes, seed=5)
    for name in state:  # keep activations in a sane range
        if not name.startswith(("adam_", "global_step")):
            state[name] = (state[name] * 0.1).astype(np.float32)
    params = {k: v for k, v in state.items() if k in model_axes}
    full_path = str(tmp_path / "full.ckpt")
    save_ms_checkpoint(params, full_path)

    ckpt_dir, strategies = write_sharded(str(tmp_path), model_axes, state, 2, 2, "model")
    merged_path = merge_rank_checkpoints(ckpt_dir, strategies[0], str(tmp_path / "merged"))

    ids = np.random.default_rng(0).integers(0, cfg.vocab_size, size=(2, 7)).astype(np.int32)
    ref = mindrl.models.from_pretrained(full_path, model_config=str(cfg_path), mode="pynative").logits(ids)
    got = mindrl.models.from_pretrained(merged_path, model_config=str(cfg_path), mode="pynative").logits(ids)
    assert np.isfinite(ref).all()
    np.testing.assert_array_equal(got, ref)
