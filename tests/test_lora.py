"""LoRA against PEFT on PyTorch (the reference): the same init, forward, gradients, one AdamW update, and the adapter
files each writes loading in the other."""
import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

from conftest import make_hf_checkpoint, next_token_nll_cell  # noqa: E402

R, ALPHA = 4, 8.0
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    d = tmp_path_factory.mktemp("lora_base")
    make_hf_checkpoint(d, "qwen2", seed=3)  # q/k/v biases: a bias the adapter must leave alone
    return str(d)


def _mindrl_lora(path, spec_seed=0, targets=TARGETS):
    from mindrl.models import from_pretrained
    from mindrl.models.lora import LoraSpec, add_lora
    lm = from_pretrained(path).net
    spec = LoraSpec(R, ALPHA, targets, spec_seed)
    names = add_lora(lm, spec)
    return lm, spec, names


def _peft_model(path, adapters):
    """PEFT on transformers' own model, with the adapters set to ``adapters`` (HF names, HF orientation)."""
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
    cfg = peft.LoraConfig(r=R, lora_alpha=ALPHA, target_modules=list(TARGETS), lora_dropout=0.0)
    pm = peft.get_peft_model(model, cfg)
    params = dict(pm.named_parameters())
    with torch.no_grad():
        for name, value in adapters.items():
            key = "base_model.model." + name.replace(".weight", ".default.weight")
            params[key].copy_(torch.tensor(value))
    return pm


def _adapters(lm):
    from mindrl.models.lora import adapters_of
    from mindrl.models.weights import state_numpy
    return adapters_of(state_numpy(lm))


def _batch(rng, vocab):
    ids = rng.integers(0, vocab, size=(3, 10)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[0, :3] = 0
    return ids, mask


def _torch_logits(model, ids, mask):
    pos = np.clip(np.cumsum(mask, 1) - 1, 0, None)
    out = model(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
                position_ids=torch.tensor(pos, dtype=torch.long))
    return out.logits


def _ms_logits(lm, ids, mask):
    from mindspore import Tensor
    return lm(Tensor(ids), Tensor(mask)).asnumpy()


def test_init_is_peft_default_and_the_adapted_model_starts_as_the_base(base, rng):
    from mindrl.models import from_pretrained
    lm, spec, names = _mindrl_lora(base)
    ad = _adapters(lm)
    assert sorted(ad) == sorted(names) and len(names) == 2 * 7 * 2  # A and B of 7 projections in 2 layers
    for name, v in ad.items():
        if ".lora_A." in name:
            fan_in = v.shape[1]
            assert v.shape[0] == R and np.abs(v).max() <= 1 / np.sqrt(fan_in)
            assert np.abs(v).max() > 0.8 / np.sqrt(fan_in)  # kaiming-uniform fills its interval
        else:
            assert v.shape[1] == R and not v.any()  # B starts at zero
    ids, mask = _batch(rng, 211)
    plain = from_pretrained(base).net
    np.testing.assert_array_equal(_ms_logits(lm, ids, mask), _ms_logits(plain, ids, mask))
    assert sorted(p.name for p in lm.trainable_params()) == sorted(names)  # the base is frozen


def _perturbed(lm, rng):
    """Non-zero B (and A) so every adapter term counts, at a size that moves the logits by about as much as the
    base weights' own spread (x A B grows with the width: A's entries are scaled by 1/sqrt(fan-in))."""
    import mindspore as ms
    from mindrl.parallel.layout import to_internal
    for name, p in lm.parameters_and_names():
        if ".lora_" in name:
            fan_in = p.shape[0]  # stored [in, out]
            value = rng.normal(0, 1.0 / np.sqrt(fan_in), size=p.shape[::-1]).astype(np.float32)
            p.set_data(ms.Tensor(to_internal(value, True)))


@pytest.fixture(scope="module")
def smollm2_shaped(tmp_path_factory):
    """A random LLaMA with SmolLM2-135M's layer shapes (hidden 576, 9/3 heads of 64, MLP 1536, vocab 49152, tied
    head), two layers of its thirty."""
    from transformers import LlamaConfig, LlamaForCausalLM
    d = tmp_path_factory.mktemp("smollm2_shaped")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=2,
                      num_attention_heads=9, num_key_value_heads=3, head_dim=64, rms_norm_eps=1e-5, rope_theta=1e5,
                      max_position_embeddings=512, tie_word_embeddings=True)
    LlamaForCausalLM(cfg).save_pretrained(str(d))
    return str(d)


REAL_MODEL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scratch", "real",
                          "smollm2-hf")


@pytest.mark.parametrize("model", ["tiny_qwen2", "smollm2_shaped", pytest.param("smollm2", marks=pytest.mark.slow)])
def test_forward_and_adapter_gradients_match_peft(base, smollm2_shaped, model, rng):
    import mindspore as ms
    from mindspore import Tensor
    from mindrl.parallel.layout import to_external
    if model == "smollm2" and not os.path.isfile(os.path.join(REAL_MODEL, "model.safetensors")):
        pytest.skip("scratch/real/smollm2-hf not found: `bash examples/real/run.sh --prepare` makes it")
    path = {"tiny_qwen2": base, "smollm2_shaped": smollm2_shaped, "smollm2": REAL_MODEL}[model]
    vocab = json.load(open(os.path.join(path, "config.json")))["vocab_size"]
    lm, _, names = _mindrl_lora(path)
    _perturbed(lm, rng)
    pm = _peft_model(path, _adapters(lm))
    ids, mask = _batch(rng, vocab)
    want = _torch_logits(pm, ids, mask)
    real = mask.astype(bool)  # logits at padding are arbitrary
    # float32 differences grow with depth: 2 layers agree to 2e-5 (gradients 2e-4 of their largest entry), SmolLM2's
    # 30 (logits up to ~15) to 7.3e-4 (gradients 2.0e-4)
    atol, grad_tol = (1e-3, 5e-4) if model == "smollm2" else (2e-5, 2e-4)
    np.testing.assert_allclose(_ms_logits(lm, ids, mask)[real], want.detach().numpy()[real], atol=atol, rtol=1e-4)

    weights = rng.uniform(0.5, 1.5, size=(3, 9)).astype(np.float32) * mask[:, 1:] * mask[:, :-1]
    logp = torch.log_softmax(want[:, :-1].double(), -1)
    picked = logp.gather(-1, torch.tensor(ids[:, 1:], dtype=torch.long)[..., None])[..., 0]
    (-(picked * torch.tensor(weights, dtype=torch.float64)).sum()).backward()
    torch_grads = {n[len("base_model.model."):].replace(".default.", "."): p.grad.numpy()
                   for n, p in pm.named_parameters() if p.grad is not None}
    assert sorted(torch_grads) == sorted(names)  # PEFT too trains the adapters only

    params = lm.trainable_params()
    _, grads = ms.value_and_grad(next_token_nll_cell(lm), None, params)(Tensor(ids), Tensor(mask), Tensor(ids[:, 1:].copy()),
                                                      Tensor(weights))
    for p, g in zip(params, grads):
        ref = torch_grads[p.name]
        err = np.abs(to_external(g.asnumpy(), True) - ref).max() / max(np.abs(ref).max(), 1e-3)
        assert err < grad_tol, f"{p.name}: gradient error {err:.1e}"


def test_one_adamw_update_from_the_same_init_equals_peft_and_torch(base, rng):
    """The first update from PEFT's init (B = 0, so only B moves), then a second (A moves too)."""
    import mindspore as ms
    from mindspore import Tensor
    from mindrl.trainer.optim import AdamW
    lm, _, names = _mindrl_lora(base)
    pm = _peft_model(base, _adapters(lm))
    lr, wd = 1e-2, 0.1
    ids, mask = _batch(rng, 211)
    weights = (mask[:, 1:] * mask[:, :-1]).astype(np.float32)
    params = lm.trainable_params()
    opt = AdamW(params, weight_decay=wd)
    grad_fn = ms.value_and_grad(next_token_nll_cell(lm), None, params)
    t_params = [p for p in pm.parameters() if p.requires_grad]
    t_opt = torch.optim.AdamW(t_params, lr=lr, weight_decay=wd)
    for _ in range(2):
        _, grads = grad_fn(Tensor(ids), Tensor(mask), Tensor(ids[:, 1:].copy()), Tensor(weights))
        opt(grads, Tensor(lr, ms.float32), Tensor(1.0, ms.float32))
        t_opt.zero_grad()
        logp = torch.log_softmax(_torch_logits(pm, ids, mask)[:, :-1], -1)
        picked = logp.gather(-1, torch.tensor(ids[:, 1:], dtype=torch.long)[..., None])[..., 0]
        (-(picked * torch.tensor(weights)).sum()).backward()
        t_opt.step()
    got = _adapters(lm)
    want = {n[len("base_model.model."):].replace(".default.", "."): p.detach().numpy()
            for n, p in pm.named_parameters() if p.requires_grad}
    moved = 0
    for name in names:
        np.testing.assert_allclose(got[name], want[name], atol=2e-5, rtol=1e-4, err_msg=name)
        moved += ".lora_B." in name and np.abs(got[name]).max() > 1e-3
    assert moved == len(names) // 2  # every B left zero


def test_peft_adapter_files_load_in_peft_and_merged_export_in_transformers(base, rng, tmp_path):
    from transformers import AutoModelForCausalLM
    from mindrl.models.lora import merged, read_peft_adapter, write_peft_adapter
    from mindrl.models.weights import export_hf, state_numpy
    from mindrl.models.config import load_model_config
    lm, spec, names = _mindrl_lora(base)
    _perturbed(lm, rng)
    ids, mask = _batch(rng, 211)
    real = mask.astype(bool)
    ours = _ms_logits(lm, ids, mask)[real]
    state = state_numpy(lm)
    write_peft_adapter(str(tmp_path / "adapter"), {n: state[n] for n in names}, spec, base)
    cfg = json.load(open(tmp_path / "adapter" / "adapter_config.json"))
    assert cfg["r"] == R and cfg["lora_alpha"] == ALPHA and cfg["base_model_name_or_path"] == base
    pm = peft.PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), str(tmp_path / "adapter"))
    np.testing.assert_allclose(_torch_logits(pm, ids, mask).detach().numpy()[real], ours, atol=2e-5, rtol=1e-4)

    export_hf(merged(state, spec.scale), load_model_config(base), str(tmp_path / "merged"))
    hf = AutoModelForCausalLM.from_pretrained(str(tmp_path / "merged"))
    np.testing.assert_allclose(_torch_logits(hf, ids, mask).detach().numpy()[real], ours, atol=2e-5, rtol=1e-4)
    assert not any(".lora_" in k for k in hf.state_dict())

    # and back: PEFT's own save (its "default" adapter) reads as ours
    pm.save_pretrained(str(tmp_path / "peft_saved"))
    _, back = read_peft_adapter(str(tmp_path / "peft_saved"))
    assert sorted(back) == sorted(names)
    for n in names:
        np.testing.assert_array_equal(back[n], state[n])


# -- in RL runs ------------------------------------------------------------------------------------------------------

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LORA_RUN = {"actor_config.lora_rank": 4, "actor_config.lora_alpha": 8, "actor_config.lr": 1e-2,
            "rl_config.kl_coef": 0.05}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    from conftest import make_grpo_workdir
    return make_grpo_workdir(tmp_path_factory.mktemp("lora_grpo"))


def _config(workdir, run, example="grpo", lora=True, **over):
    from conftest import tiny_run_config
    return tiny_run_config(workdir, run, {
        "rl_config.train_iters": 4, "actor_config.save": str(workdir / run / "ckpt"), "actor_config.save_interval": 2,
        **(LORA_RUN if lora else {})}, over, example)


def _run(cfg):
    from mindrl.trainer import RLTrainer
    trainer = RLTrainer(cfg)
    trainer.fit()
    return trainer


def _steps(path):
    return [r for r in (json.loads(line) for line in open(path)) if "timing/all" in r]


@pytest.fixture(scope="module")
def lora_run(workdir):
    """4 GRPO steps with LoRA on the policy and a KL term, saved at steps 2 and 4."""
    return _run(_config(workdir, "lora"))


def test_grpo_trains_the_adapters_only_rolls_out_adapted_and_resumes_exactly(workdir, lora_run):
    from mindrl.models.lora import read_peft_adapter
    from mindrl.models.weights import TensorSource
    full = lora_run
    rows = _steps(workdir / "lora" / "logs" / "metrics.jsonl")
    assert rows[0]["actor/kl_loss"] == 0.0 and rows[-1]["actor/kl_loss"] > 0  # the reference is the frozen base
    policy = workdir / "lora" / "ckpt" / "iter_0000004" / "policy"
    config, adapters = read_peft_adapter(str(policy / "adapter"))
    assert config["r"] == 4 and config["lora_alpha"] == 8 and config["base_model_name_or_path"] == str(workdir / "policy")
    base, merged = TensorSource(str(workdir / "policy")), TensorSource(str(policy))
    assert sorted(merged.names()) == sorted(base.names())  # the merged export: the base's tensors, no adapter
    changed = 0
    for name in base.names():  # merged = W + (alpha / r) B A, in float64 from the files; the rest is the base's
        module = name[:-len(".weight")]
        want = base.get(name).astype(np.float64)
        if f"{module}.lora_A.weight" in adapters:
            want = want + 2.0 * (adapters[f"{module}.lora_B.weight"].astype(np.float64)
                                 @ adapters[f"{module}.lora_A.weight"].astype(np.float64))
            changed += 1
        np.testing.assert_allclose(merged.get(name), want, rtol=0, atol=1e-6, err_msg=name)
    assert changed == 7 and max(np.abs(v).max() for k, v in adapters.items() if ".lora_B." in k) > 1e-3
    moments = TensorSource(str(policy / "optimizer.safetensors")).names()
    assert moments and all(".lora_" in n for n in moments if n != "global_step")  # no state for the base
    # at equal layouts the rollout decodes the train network itself, adapters included (the base held once):
    # greedy tokens and their log-probs are the merged export's, computed here in float64 from its logits
    from mindrl.models import from_pretrained
    from mindrl.rollout.sampling import SamplingParams
    assert full.policy.infer_net is full.policy.net
    prompts = np.random.default_rng(5).integers(3, 150, size=(3, 9)).tolist()
    out = full.policy.generate(prompts, SamplingParams(n=1, max_tokens=6, do_sample=False), seed=0)
    exported, plain = from_pretrained(str(policy)), from_pretrained(str(workdir / "policy"))
    moved = 0.0
    for prompt, tokens, lps in zip(prompts, out.tokens, out.log_probs):
        ids = np.array([prompt + tokens], np.int32)
        for lm, name in ((exported, "merged"), (plain, "base")):
            logits = lm.logits(ids)[0, len(prompt) - 1:-1].astype(np.float64)
            logp = logits - logits.max(-1, keepdims=True)
            logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
            want = logp[np.arange(len(tokens)), tokens]
            if name == "merged":
                assert list(logits.argmax(-1)) == tokens
                np.testing.assert_allclose(lps, want, rtol=0, atol=2e-5)
            else:
                moved = max(moved, float(np.abs(lps - want).max()))
    assert moved > 1e-3  # the adapters change what the rollout samples from

    import shutil
    shutil.copytree(workdir / "lora" / "ckpt" / "iter_0000002", workdir / "lora_src" / "iter_0000002")
    (workdir / "lora_src" / "latest_checkpointed_iteration.txt").write_text("2")
    resumed = _run(_config(workdir, "lora_resumed", **{"actor_config.finetune": "false",
                                                       "actor_config.load": str(workdir / "lora_src")}))
    again = _steps(workdir / "lora_resumed" / "logs" / "metrics.jsonl")
    assert [r["step"] for r in again] == [3, 4]
    for a, b in zip(rows[2:], again):
        for key in ("grpo/score/mean", "actor/pg_loss", "actor/grad_norm", "actor/kl_loss"):
            assert a[key] == b[key], key
    wa, wb = full.policy.state_dict(), resumed.policy.state_dict()
    assert sorted(wa) == sorted(wb) and all(np.array_equal(wa[k], wb[k]) for k in wa)


def test_reshard_into_a_plain_copy_writes_the_merged_weights(base):
    """A LoRA train network resharded into a plain network (the rollout copy another layout needs; here both at
    tp=1, the msrun layer test goes between tp=1 and tp=2) writes W + s A B there, in place: held against float64
    numpy from the same tensors."""
    from mindspore import Tensor
    from mindrl.models import from_pretrained
    from mindrl.models.weights import state_numpy
    from mindrl.parallel.reshard import Resharder, rename_parameters
    lm, spec, names = _mindrl_lora(base)
    rng = np.random.default_rng(11)
    params = dict(lm.parameters_and_names())
    for n in names:  # B starts at zero: give both factors values so the product is not zero
        params[n].set_data(Tensor(rng.normal(0, 0.05, params[n].shape).astype(np.float32)))
    infer = from_pretrained(base).net
    rename_parameters(infer, "infer")
    for _, p in infer.parameters_and_names():
        p.set_data(Tensor(np.zeros(p.shape, np.float32)))
    Resharder(lm, infer, lm.tp, infer.tp, spec.scale)()
    train, got = state_numpy(lm), state_numpy(infer)
    assert sorted(got) == sorted(n for n in train if ".lora_" not in n)
    for name, value in got.items():  # HF orientation: W [out, in], A [r, in], B [out, r]
        module = name[:-len(".weight")]
        want = train[name].astype(np.float64)
        if f"{module}.lora_A.weight" in train:
            want = want + spec.scale * (train[f"{module}.lora_B.weight"].astype(np.float64)
                                        @ train[f"{module}.lora_A.weight"].astype(np.float64))
        np.testing.assert_allclose(value, want, rtol=0, atol=1e-6, err_msg=name)


def test_ppo_with_a_lora_critic_saves_its_value_head_with_the_adapter(workdir):
    """The critic too: adapters plus its value head (PEFT's modules_to_save) trained, its backbone frozen."""
    from mindrl.models.lora import read_peft_adapter
    from mindrl.models.weights import TensorSource
    trainer = _run(_config(workdir, "ppo_lora", example="ppo", **{
        "rl_config.train_iters": 2, "rl_config.n_samples_per_prompt": 1, "rl_config.global_batch_size": 8,
        "rl_config.mini_batch_size": 8, "rl_config.critic_warmup": 0, "critic_config.lora_rank": 4,
        "critic_config.lr": 1e-2, "eval.path": "null"}))
    names = trainer.critic.trained_names()
    assert "score.weight" in names and all(".lora_" in n for n in names if n != "score.weight")
    critic = workdir / "ppo_lora" / "ckpt" / "iter_0000002" / "critic"
    config, tensors = read_peft_adapter(str(critic / "adapter"))
    assert config["task_type"] == "SEQ_CLS" and config["modules_to_save"] == ["score"]
    assert np.abs(tensors["score.weight"]).max() > 0  # started at zero, trained
    assert "score.weight" in TensorSource(str(critic)).names()


@pytest.mark.parametrize("over, key", [
    ({"actor_config.lora_dropout": 0.05}, "actor_config.lora_dropout"),
    ({"actor_config.lora_target_modules": "[q_proj,attn]"}, "actor_config.lora_target_modules"),
    ({"ref.ref_model_load_path": "/elsewhere"}, "ref.ref_model_load_path"),
    ({"lora": False, "actor_config.lora_alpha": 32}, "actor_config.lora_alpha"),  # no adapters: lora_rank is 0
])
def test_lora_keys_that_cannot_be_honoured_are_refused(workdir, over, key):
    from mindrl.config.errors import ConfigError
    with pytest.raises(ConfigError) as err:
        _config(workdir, "refused", **over)
    assert key in str(err.value)


@pytest.mark.parametrize("over, says", [
    ({"lora": False}, "lora_rank: 0, but the run being resumed trained LoRA adapters"),
    ({"actor_config.lora_rank": 8}, "the run being resumed trained adapters r=4, alpha=8 on q_proj"),
])
def test_a_resume_that_would_train_something_else_is_refused_before_compute(workdir, lora_run, over, says):
    from mindrl.config.errors import ConfigError
    from mindrl.trainer.preflight import preflight
    with pytest.raises(ConfigError) as err:
        preflight(_config(workdir, "wrong_resume", **{"actor_config.finetune": "false",
                                                      "actor_config.load": str(workdir / "lora" / "ckpt"), **over}))
    assert says in str(err.value)


def test_a_resume_whose_base_changed_is_refused(workdir, tmp_path):
    """The adapter records its base's real path and file checksums: a base rewritten since (or reached through a
    link that now points elsewhere) is refused before anything is built, never trained on with the old adapter."""
    import shutil
    from mindrl.config.errors import ConfigError
    from mindrl.models.safetensors_io import SafetensorsFile, save_safetensors
    from mindrl.trainer.preflight import preflight
    base = tmp_path / "base"
    shutil.copytree(workdir / "policy", base)
    os.symlink(base, tmp_path / "latest")  # as runs/<name>/latest
    _run(_config(workdir, "lora_moved_base", **{"rl_config.train_iters": 2, "actor_config.load": str(tmp_path / "latest")}))
    ckpt = workdir / "lora_moved_base" / "ckpt"
    record = json.load(open(ckpt / "iter_0000002" / "policy" / "adapter" / "mindrl_base.json"))
    assert record["base"] == str(base) and "model.safetensors" in record["files"]
    resume = {"actor_config.finetune": "false", "actor_config.load": str(ckpt), "rl_config.train_iters": 4}
    preflight(_config(workdir, "lora_moved_ok", **resume))  # unchanged: accepted
    f = SafetensorsFile(str(base / "model.safetensors"))
    tensors = {k: f.get(k) for k in f.keys()}
    tensors["model.norm.weight"] = tensors["model.norm.weight"] * 1.5
    save_safetensors(tensors, str(base / "model.safetensors"))
    with pytest.raises(ConfigError) as err:
        preflight(_config(workdir, "lora_moved_refused", **resume))
    assert "have changed since (model.safetensors" in str(err.value)
