"""Model core against transformers (PyTorch, float32) on the same safetensors."""
import json
import os
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from mindrl.models import ModelConfigError, from_pretrained  # noqa: E402
from mindrl.models.safetensors_io import CheckpointError  # noqa: E402
from mindrl.rollout import generate  # noqa: E402

from conftest import VOCAB, make_hf_checkpoint  # noqa: E402


def rel_err(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def torch_logits(model, ids, mask=None):
    with torch.no_grad():
        kw = {} if mask is None else {"attention_mask": torch.tensor(mask)}
        return model(torch.tensor(ids, dtype=torch.long), **kw).logits.float().numpy()


@pytest.mark.parametrize("arch", ["qwen2", "llama", "qwen3"])
def test_logits_match_transformers(hf_models, arch, rng):
    path, ref_model = hf_models[arch]
    ids = rng.integers(0, VOCAB, size=(3, 37)).astype(np.int32)
    ours = from_pretrained(path).logits(ids)
    assert ours.shape == (3, 37, VOCAB) and ours.dtype == np.float32
    assert rel_err(ours, torch_logits(ref_model, ids)) <= 1e-4


def test_left_padded_batch_matches_unpadded(hf_models, rng):
    path, ref_model = hf_models["qwen2"]
    model = from_pretrained(path)
    ids = rng.integers(1, VOCAB, size=(2, 12)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[0, :5] = 0  # row 0 is a 7-token prompt, left padded
    ids[0, :5] = 0
    ours = model.logits(ids, mask)
    alone = torch_logits(ref_model, ids[:1, 5:])
    assert rel_err(ours[0, 5:], alone[0]) <= 1e-4


@pytest.mark.parametrize("arch", ["qwen2", "llama", "qwen3"])
def test_greedy_generation_matches_transformers(hf_models, arch, rng):
    path, ref_model = hf_models[arch]
    model = from_pretrained(path)
    prompts = [list(map(int, rng.integers(0, VOCAB, size=n))) for n in (4, 11, 7)]
    ours = generate(model, prompts, max_new_tokens=24)
    for prompt, out in zip(prompts, ours):
        with torch.no_grad():
            ref = ref_model.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False,
                                     eos_token_id=None, pad_token_id=0)[0, len(prompt):].tolist()
        assert out == ref


def test_kv_cache_decode_logits_equal_full_recompute(hf_models, rng):
    from mindrl.rollout.generator import Generator
    path, _ = hf_models["qwen3"]
    model = from_pretrained(path)
    gen = Generator(model.net, max_batch=4, max_prompt_len=16, max_new_tokens=8)
    ids = rng.integers(0, VOCAB, size=(4, 16)).astype(np.int32)
    mask = np.ones_like(ids)
    from mindspore import Tensor
    import mindspore as ms
    rows = Tensor(np.arange(4, dtype=np.int32).reshape(4, 1))
    prefill = gen.prefill_cell(Tensor(ids), Tensor(mask), rows).asnumpy()
    full = model.logits(ids)
    assert rel_err(prefill, full[:, -1]) <= 1e-5
    seq = ids
    step_logits = prefill
    for step in range(5):
        nxt = step_logits.argmax(-1).astype(np.int32)
        step_logits = gen.decode_cell(Tensor(nxt), Tensor(np.full(4, 16 + step, np.int32)),
                                      Tensor(np.zeros(4, np.int32))).asnumpy()
        seq = np.concatenate([seq, nxt[:, None]], 1)
        assert rel_err(step_logits, model.logits(seq)[:, -1]) <= 1e-5


def test_tied_head_decode_follows_the_embedding_as_it_trains(hf_models, rng):
    """A tied head decodes from the generator's transposed copy of the embedding: logits equal a full recompute,
    and after the embedding changes (a training step) the next generate() reads the new weights."""
    import mindspore as ms
    from mindspore import Tensor
    from mindrl.rollout.generator import Generator
    from mindrl.rollout.sampling import SamplingParams
    path, _ = hf_models["llama"]  # tie_word_embeddings: true
    model = from_pretrained(path)
    assert model.net.tied
    gen = Generator(model.net, max_batch=4, max_prompt_len=16, max_new_tokens=6)
    prompts = [list(map(int, rng.integers(0, VOCAB, size=12))) for _ in range(4)]
    params = SamplingParams(n=1, max_tokens=6, do_sample=False)
    for _ in range(2):
        out = gen.generate(prompts, params)
        for p, toks in zip(prompts, out.tokens):  # greedy: each token is the full recompute's argmax
            seq = np.array([p + toks], np.int32)
            logits = model.logits(seq)[0]
            assert [int(x) for x in logits[len(p) - 1:-1].argmax(-1)] == toks
        w = model.net.model.embed_tokens.weight
        w.set_data(Tensor(w.asnumpy() + rng.normal(size=w.shape).astype(np.float32) * 0.5, ms.float32))


def test_sampling_reproducible_and_n_samples_share_prefill(hf_models, rng):
    path, _ = hf_models["qwen2"]
    model = from_pretrained(path)
    prompts = [list(map(int, rng.integers(0, VOCAB, size=n))) for n in (5, 8)]
    kw = dict(max_new_tokens=10, do_sample=True, temperature=0.9, top_k=50, top_p=0.95, seed=7, n=4)
    a = generate(model, prompts, **kw)
    b = generate(model, prompts, **kw)
    c = generate(model, prompts, **{**kw, "seed": 8})
    assert a == b and a != c
    assert len(a) == 8 and all(len(x) == 10 for x in a)
    assert len({tuple(x) for x in a[:4]}) > 1  # samples of one prompt differ


def test_sampled_token_distribution_matches_softmax():
    """The inverse-CDF sampler draws from softmax(logits / T) restricted by top-k (chi-square-ish check)."""
    from mindrl.rollout.sampling import Sampler, SamplingParams
    logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]], np.float32))
    sampler = Sampler(SamplingParams(temperature=1.0, top_k=3), 4, seed=0)
    counts = np.zeros(4)
    for step in range(4000):
        tok, lp = sampler.sample(logits, [[]], step)
        counts[tok[0]] += 1
        assert np.isclose(lp[0], np.log([0.5, 0.3, 0.15, 0.05])[tok[0]], atol=1e-5)
    expected = np.array([0.5, 0.3, 0.15, 0.0]) / 0.95
    assert counts[3] == 0
    assert np.allclose(counts / counts.sum(), expected, atol=0.03)


def test_top_p_keeps_smallest_prefix():
    from mindrl.rollout.sampling import Sampler, SamplingParams
    logits = np.log(np.array([[0.1, 0.6, 0.25, 0.05]], np.float32))
    sampler = Sampler(SamplingParams(top_p=0.8), 4, seed=1)
    seen = {int(sampler.sample(logits, [[]], s)[0][0]) for s in range(300)}
    assert seen == {1, 2}


def test_eos_stops_and_is_included(hf_models, rng):
    path, _ = hf_models["llama"]
    model = from_pretrained(path)
    prompt = list(map(int, rng.integers(0, VOCAB, size=6)))
    free = generate(model, [prompt], max_new_tokens=12)[0]
    eos = free[3]
    first = free.index(eos)
    stopped = generate(model, [prompt], max_new_tokens=12, eos_token_id=eos)[0]
    assert stopped == free[:first + 1]
    banned = generate(model, [prompt], max_new_tokens=12, eos_token_id=eos, min_tokens=12)[0]
    assert len(banned) == 12 and eos not in banned


def test_log_probs_match_transformers(hf_models, rng):
    path, ref_model = hf_models["qwen3"]
    model = from_pretrained(path)
    ids = rng.integers(0, VOCAB, size=(5, 20)).astype(np.int32)
    lp, ent = model.log_probs(ids, micro_batch_size=2, with_entropy=True, temperature=0.7)
    ref = torch.log_softmax(torch.tensor(torch_logits(ref_model, ids), dtype=torch.float64) / 0.7, -1)
    ref_lp = ref[:, :-1].gather(-1, torch.tensor(ids[:, 1:], dtype=torch.long)[..., None])[..., 0].numpy()
    ref_ent = -(ref.exp() * ref).sum(-1)[:, :-1].numpy()
    assert np.allclose(lp, ref_lp, atol=1e-4) and np.allclose(ent, ref_ent, atol=1e-4)


def test_export_roundtrip_loads_in_transformers(hf_models, tmp_path, rng):
    path, ref_model = hf_models["qwen2"]
    model = from_pretrained(path)
    out = tmp_path / "export"
    model.save_pretrained(str(out))
    again = transformers.AutoModelForCausalLM.from_pretrained(str(out)).eval()
    ids = rng.integers(0, VOCAB, size=(2, 9)).astype(np.int32)
    assert rel_err(torch_logits(again, ids), torch_logits(ref_model, ids)) <= 1e-6


@pytest.mark.parametrize("ext", [".ckpt", ".safetensors"])
def test_mindspore_checkpoint_roundtrip(hf_models, tmp_path, ext, rng):
    path, ref_model = hf_models["llama"]
    model = from_pretrained(path)
    ck = str(tmp_path / f"m{ext}")
    model.save_checkpoint(ck)
    again = from_pretrained(ck, model_config=os.path.join(path, "config.json"))
    ids = rng.integers(0, VOCAB, size=(2, 9)).astype(np.int32)
    assert np.array_equal(again.logits(ids), model.logits(ids))


def test_bf16_checkpoint_loads_exactly(tmp_path, rng):
    ref = make_hf_checkpoint(tmp_path / "fp32", "qwen2", seed=3)
    ref = ref.to(torch.bfloat16)
    ref.save_pretrained(str(tmp_path / "bf16"), safe_serialization=True)
    model = from_pretrained(str(tmp_path / "bf16"))
    w = model.state_dict()["model.layers.1.mlp.down_proj.weight"]
    assert np.array_equal(w, ref.model.layers[1].mlp.down_proj.weight.detach().float().numpy())


def test_reward_head_loads_sequence_classification(tmp_path, rng):
    ref = make_hf_checkpoint(tmp_path / "rm", "qwen2_seqcls", seed=5)
    model = from_pretrained(str(tmp_path / "rm"), kind="reward")
    ids = rng.integers(1, VOCAB, size=(3, 10)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 7:] = 0  # right padding: the score is read at the last real token
    ids[1, 7:] = 0
    from mindspore import Tensor
    ours = model.net(Tensor(ids), Tensor(mask)).asnumpy()
    with torch.no_grad():
        theirs = ref(torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask)).logits[:, 0].numpy()
    assert np.allclose(ours, theirs, atol=1e-4)


# ---- bad input: clear errors naming the file or parameter ------------------------------------------

def test_missing_weights_file(hf_models, tmp_path):
    d = tmp_path / "nomodel"
    shutil.copytree(hf_models["qwen2"][0], d)
    os.remove(d / "model.safetensors")
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        from_pretrained(str(d))


def test_truncated_safetensors(hf_models, tmp_path):
    d = tmp_path / "trunc"
    shutil.copytree(hf_models["qwen2"][0], d)
    f = d / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"model\.safetensors: truncated"):
        from_pretrained(str(d))


def test_unknown_model_type(hf_models, tmp_path):
    d = tmp_path / "gpt"
    shutil.copytree(hf_models["qwen2"][0], d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["model_type"] = "gpt_neox"
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelConfigError, match=r"config\.json: model_type: unknown model_type 'gpt_neox'"):
        from_pretrained(str(d))


def test_shape_mismatch_names_parameter(hf_models, tmp_path):
    d = tmp_path / "mismatch"
    shutil.copytree(hf_models["qwen2"][0], d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["intermediate_size"] = 80
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"mlp\.gate_proj\.weight.*\[72, 48\].*\[80, 48\]"):
        from_pretrained(str(d))


def test_yaml_model_config_matches_hf(hf_models, tmp_path):
    """A MindFormers-style yaml describing the same model loads the same weights to the same logits."""
    from mindrl.models.config import load_model_config
    path, _ = hf_models["qwen3"]
    hf_cfg = load_model_config(path)
    yaml_path = tmp_path / "m.yaml"
    import yaml
    yaml_path.write_text(yaml.safe_dump(hf_cfg.to_yaml_dict()))
    again = load_model_config(str(yaml_path))
    assert again.replace(source="x") == hf_cfg.replace(source="x")


def test_repetition_penalty_matches_transformers(hf_models, rng):
    path, ref_model = hf_models["qwen2"]
    model = from_pretrained(path)
    prompts = [list(map(int, rng.integers(0, VOCAB, size=7))) for _ in range(4)]
    ours = generate(model, prompts, max_new_tokens=24, repetition_penalty=3.0)
    plain = generate(model, prompts, max_new_tokens=24)
    for prompt, out in zip(prompts, ours):
        with torch.no_grad():
            ref = ref_model.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False,
                                     repetition_penalty=3.0, eos_token_id=None,
                                     pad_token_id=0)[0, len(prompt):].tolist()
        assert out == ref
    assert ours != plain  # the penalty changed something


def test_float16_compute_is_close_to_float32(hf_models, rng):
    path, ref_model = hf_models["llama"]
    ids = rng.integers(0, VOCAB, size=(2, 13)).astype(np.int32)
    half = from_pretrained(path, dtype="float16").logits(ids)
    assert half.dtype == np.float32
    assert rel_err(half, torch_logits(ref_model, ids)) <= 1e-2


def test_bfloat16_compute_falls_back_on_cpu(hf_models, rng, caplog):
    from mindrl.models import decoder
    path, ref_model = hf_models["qwen3"]
    decoder._SAID.discard("bf16")
    with caplog.at_level("WARNING", logger="mindrl.models"):
        model = from_pretrained(path, dtype="bfloat16")
    assert [r.message for r in caplog.records].count(
        "compute_dtype bfloat16 is not supported on CPU (no bf16 MatMul kernel); computing in float32") == 1
    ids = rng.integers(0, VOCAB, size=(1, 9)).astype(np.int32)
    assert rel_err(model.logits(ids), torch_logits(ref_model, ids)) <= 1e-4
