"""Shared fixtures: tiny Hugging Face checkpoints made with transformers (the reference oracle)."""
import os

import numpy as np
import pytest

os.environ.setdefault("GLOG_v", "3")  # keep MindSpore's C++ logging quiet in test output

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = 211  # odd sizes on purpose: nothing may assume powers of two


def make_hf_checkpoint(directory, arch: str, seed: int = 0, **overrides):
    """Write a random tiny HF model of `arch` (qwen2 | llama | qwen3 | qwen2_seqcls) to `directory`."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    common = dict(vocab_size=VOCAB, hidden_size=48, intermediate_size=72, num_hidden_layers=2,
                  num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6)
    common.update(overrides)
    if arch in ("qwen2", "qwen2_seqcls"):
        cfg = transformers.Qwen2Config(**common, rope_theta=1e6, tie_word_embeddings=False)
        if arch == "qwen2_seqcls":
            cfg.num_labels = 1
            cfg.pad_token_id = 0
            cls = transformers.Qwen2ForSequenceClassification
        else:
            cls = transformers.Qwen2ForCausalLM
    elif arch == "llama":
        cfg = transformers.LlamaConfig(**common, rope_theta=5e5, tie_word_embeddings=True,
                                       rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                     "high_freq_factor": 4.0,
                                                     "original_max_position_embeddings": 64})
        cls = transformers.LlamaForCausalLM
    elif arch == "qwen3":
        cfg = transformers.Qwen3Config(**common, head_dim=12, rope_theta=1e6, tie_word_embeddings=False)
        cls = transformers.Qwen3ForCausalLM
    else:
        raise ValueError(arch)
    model = cls(cfg).eval()
    with torch.no_grad():  # HF inits norms to 1 and biases to 0: perturb so every weight matters
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(str(directory), safe_serialization=True)
    return model


def next_token_nll_cell(lm):
    """(ids, mask, targets, weights) -> -sum(weights * log p(target)) through ``lm``'s logits: the loss the gradient
    tests take through both frameworks."""
    from mindspore import nn, ops

    class Loss(nn.Cell):
        def __init__(self):
            super().__init__(auto_prefix=False)
            self.lm = lm

        def construct(self, ids, mask, targets, w):
            logp = ops.log_softmax(self.lm(ids, mask)[:, :-1], -1)
            return -(ops.gather_elements(logp, 2, targets.reshape(targets.shape + (1,))).squeeze(-1) * w).sum()
    return Loss()


@pytest.fixture(scope="session")
def hf_models(tmp_path_factory):
    """{arch: (directory, torch model)} for the three decoder families."""
    out = {}
    for arch in ("qwen2", "llama", "qwen3"):
        d = tmp_path_factory.mktemp(f"hf_{arch}")
        out[arch] = (str(d), make_hf_checkpoint(d, arch))
    return out


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def pynative_mode():
    """For tests that call ms.grad on Python lambdas (PyNative); other modules leave the process in GRAPH_MODE."""
    import mindspore as ms
    prev = ms.get_context("mode")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    yield
    ms.set_context(mode=prev)


def tiny_run_settings(d, log_dir, **over) -> dict:
    """Config overrides of the tests' small run on a ``make_grpo_workdir`` directory: 4 prompts x 4 samples,
    one update per step, the dense ``ones`` reward next to ``last_number``, nothing saved, no eval."""
    settings = {
        "rl_config.train_iters": 1, "rl_config.global_batch_size": 4, "rl_config.n_samples_per_prompt": 4,
        "rl_config.mini_batch_size": 4, "rl_config.micro_batch_size": 8, "rl_config.dynamic_sampling": "false",
        "rl_config.verifier_function": "[last_number,ones]", "rl_config.verifier_weight": "[1.0,1.0]",
        "rl_config.custom_reward_file": str(d / "digits.py"),
        "actor_config.model": str(d / "policy"), "actor_config.load": str(d / "policy"),
        "actor_config.tokenizer_name_or_path": os.path.join(ROOT, "examples", "tiny", "tokenizer"),
        "actor_config.lr": 1e-3, "actor_config.lr_warmup_iters": 0, "actor_config.save": "null",
        "actor_config.save_interval": 0, "data.path": str(d / "train.mindrecord"), "eval.path": "null",
        "logging.log_dir": str(log_dir), "logging.progress_bar": "false"}
    settings.update(over)
    return settings


def steps_and_weights(trainer, steps: int = 2):
    """``steps`` RL steps of ``trainer``: (their metrics, the policy's weights after them by name)."""
    metrics = [trainer.train_step() for _ in range(steps)]
    return metrics, {n: p.asnumpy().copy() for n, p in trainer.policy.net.parameters_and_names()}


def assert_same_steps(one, other) -> None:
    """Two runs' ``steps_and_weights``: the same rollouts, the same actor metrics, and the same weights. The two
    may sum in other orders, and Adam divides each gradient by its own running scale: an element whose gradient
    is near zero can move differently on rounding alone (one of 2,048 by 2.1e-6 over 4 updates, shared prompts
    against rows), so weights agree to 1e-5, a hundredth of one step of the tests' lr 1e-3."""
    import numpy as np
    import pytest
    (m_a, w_a), (m_b, w_b) = one, other
    for a, b in zip(m_a, m_b):
        assert a["response_length/mean"] == b["response_length/mean"]  # the same rollouts
        for k in ("actor/pg_loss", "actor/kl_loss", "actor/entropy", "actor/grad_norm"):
            assert a[k] == pytest.approx(b[k], rel=2e-4, abs=1e-6), k
    for n in w_b:
        np.testing.assert_allclose(w_a[n], w_b[n], rtol=1e-4, atol=1e-5, err_msg=n)


def as_overrides(settings: dict) -> list:
    return [f"{k}={v}" for k, v in settings.items()]


def tiny_run_config(d, run, base: dict, over: dict, example: str = "grpo"):
    """The typed config of the tests' small run (``tiny_run_settings``) on ``examples/<example>/tiny_math.yaml``,
    logging under ``d/run/logs``: a test module's ``base`` settings, then one test's ``over``."""
    from mindrl.config import load_train_config
    settings = tiny_run_settings(d, d / run / "logs", **base)
    settings.update(over)
    return load_train_config(os.path.join(ROOT, "examples", example, "tiny_math.yaml"), as_overrides(settings))


def make_sft_mindrecord(d):
    """``d/sft.mindrecord``: the workdir's training problems with their answers (pretrain_ids, loss_mask), as
    configs/datasets/sft.yaml writes them; the rows PPO-ptx trains on."""
    from mindrl.data.preprocess import cli_main
    rc = cli_main(["--config", os.path.join(ROOT, "configs", "datasets", "sft.yaml"), f"input={d / 'train.jsonl'}",
                   f"output_prefix={d / 'sft'}",
                   f"tokenizer_name_or_path={os.path.join(ROOT, 'examples', 'tiny', 'tokenizer')}"])
    assert rc == 0
    return d / "sft.mindrecord"


def make_grpo_workdir(d):
    """A random tiny Qwen2 policy (HF dir) and prompt/held-out MindRecords made with `mindrl preprocess`."""
    import sys
    sys.path.insert(0, os.path.join(ROOT, "examples", "tiny"))
    import task
    from mindrl.data.preprocess import cli_main
    from mindrl.models.config import ModelConfig
    from mindrl.models.lm import PretrainedLM, build_network
    from mindrl.runtime import setup_context
    setup_context("graph")
    cfg = ModelConfig(model_type="qwen2", vocab_size=192, hidden_size=32, intermediate_size=64, num_layers=1,
                      num_heads=4, n_kv_heads=2, max_position_embeddings=64, tie_word_embeddings=True,
                      qkv_bias=True, eos_token_id=2, pad_token_id=0).validate()
    PretrainedLM(build_network(cfg, seed=3), cfg).save_pretrained(str(d / "policy"))
    task.write_jsonl(str(d / "train.jsonl"), task.training_ids(256, seed=5))
    task.write_jsonl(str(d / "heldout.jsonl"), task.heldout_ids()[:16])
    # a dense reward, so a random policy gets non-zero advantages (and a custom reward file is exercised)
    (d / "digits.py").write_text(
        "from mindrl.rewards import register_reward\n\n"
        "@register_reward('ones')\n"
        "def ones(response, label):\n"
        "    return response.count('1') / 6.0\n")
    tokenizer = os.path.join(ROOT, "examples", "tiny", "tokenizer")
    for name in ("train", "heldout"):
        rc = cli_main(["--config", os.path.join(ROOT, "configs", "datasets", "tiny_math.yaml"),
                       f"input={d / name}.jsonl", f"output_prefix={d / name}", f"tokenizer_name_or_path={tokenizer}"])
        assert rc == 0
    return d


# Files in the order the two test workers (scripts/test.sh) take them: the longest first (a rough measure of one CI
# run; the rest follow in collection order), so that no long file starts when the other worker is nearly done. A
# stale order costs minutes, never a result. scripts/test.sh turns off xdist's own reordering (by test count).
LONGEST_FIRST = ("test_recipes.py",  # first: its 16 GB step then meets the lighter starts of the next two files
                 "test_docs.py", "test_demo.py", "test_parallel.py", "test_reliability.py", "test_tutorial.py",
                 "test_grpo.py", "test_ppo.py", "test_mindspeed_config.py", "test_runs.py",
                 "test_startup_refusals.py", "test_ppo_loop.py", "test_layer_graphs.py", "test_interrupt.py", "test_launcher.py",
                 "test_bench_real_smoke.py", "test_rl_loop.py", "test_models.py", "test_bench_smoke.py",
                 "test_multinode.py", "test_compile_cache.py", "test_api.py", "test_bench_ppo_smoke.py",
                 "test_real_roundtrip.py", "test_sft.py", "test_dpo.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file keeps its own order


def stop_then_resume(trainer, cli_main, command: str, at: int = 2) -> str:
    """An offline trainer's run (`mindrl train-rm`, `mindrl sft`: trainer/offline.py) that Ctrl-C stops during step
    ``at + 1`` (what interrupt.py's thread does with a SIGINT): it must save that step, write no model and print the
    command that resumes it; that command, as printed, is then run with ``cli_main`` to the end. Returns the
    resume command."""
    import shlex
    import signal
    from mindrl.trainer import interrupt
    step = trainer.train_step

    def step_then_ctrl_c(batch, i):
        out = step(batch, i)
        if i == at:
            interrupt._received(signal.SIGINT)
        return out
    trainer.train_step = step_then_ctrl_c
    with pytest.raises(interrupt.RunInterrupted) as stopped:
        trainer.fit()
    assert stopped.value.exit_code == 130 and stopped.value.checkpoint.endswith(f"iter_{at + 1:07d}")
    assert not os.path.exists(os.path.join(trainer.run_dir, "model"))  # written by the run that finishes
    argv = shlex.split(stopped.value.resume)
    assert argv[:2] == ["mindrl", command]
    assert cli_main(argv[2:]) == 0
    return stopped.value.resume


def record_prefill_rows(gen):
    """Wrap a rollout Generator's prefill graph so that each call's row count is recorded; returns the list."""
    calls, prefill = [], gen.prefill_cell

    def recorded(ids, mask, rows):
        calls.append(ids.shape[0])
        return prefill(ids, mask, rows)
    gen.prefill_cell = recorded
    return calls
