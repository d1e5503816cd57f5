"""PPO's reward-model side and start-up checks, each against an independent reference.

- the Bradley-Terry loss cell of `mindrl train-rm` (loss, metrics, gradient) against float64 numpy written from
  ``-log sigmoid(r_c - r_r - margin)``, at the cell and through one trainer step on a pairwise MindRecord;
- where a reward model reads its score (last real token, padding on either side);
- `mindrl train-rm`'s HF export read back by transformers' AutoModelForSequenceClassification: the same scores as
  mindrl's RewardScorer, the stored reward mean/std, and a PPO config that points at it passing preflight;
- refusals before anything is built (preflight and config rules), naming the key, exit status 2 from the CLI;
- a MindSpeed-RL-shaped PPO yaml loading into typed values.

GAE and the clipped value loss are tested in test_algorithms.py, KL controllers in test_estimators.py.
"""
import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest
import yaml


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "examples", "tiny"))

TOKENIZER = os.path.join(ROOT, "examples", "tiny", "tokenizer")
PPO_YAML = os.path.join(ROOT, "examples", "ppo", "tiny_math.yaml")
PPO_RM_YAML = os.path.join(ROOT, "examples", "ppo", "tiny_math_rm.yaml")
GRPO_YAML = os.path.join(ROOT, "examples", "grpo", "tiny_math.yaml")
PAIRS_DATASET = os.path.join(ROOT, "configs", "datasets", "tiny_math_pairs.yaml")


def tiny_model_config(**over):
    """The architecture of conftest.make_grpo_workdir's policy (vocab 192, hidden 32, one layer)."""
    from mindrl.models.config import ModelConfig
    base = dict(model_type="qwen2", vocab_size=192, hidden_size=32, intermediate_size=64, num_layers=1,
                num_heads=4, n_kv_heads=2, max_position_embeddings=64, tie_word_embeddings=True, qkv_bias=True,
                eos_token_id=2, pad_token_id=0)
    base.update(over)
    return ModelConfig(**base).validate()


# ---------------------------------------------------------------------------------------------
# float64 references, from the formulas

def bradley_terry_reference(r_c, r_r, margin, denom):
    """(loss, accuracy, margin_mean, chosen_mean, rejected_mean): sums over the pairs / denom, as the cell reports
    them; loss = -log sigmoid(r_c - r_r - margin) (OpenRLHF's PairWiseLoss), accuracy = share with r_c > r_r."""
    r_c, r_r, m = (np.asarray(x, np.float64) for x in (r_c, r_r, margin))
    z = r_c - r_r - m
    nll = -np.log(1.0 / (1.0 + np.exp(-z)))
    return (nll.sum() / denom, float((r_c > r_r).sum()) / denom, (r_c - r_r).sum() / denom, r_c.sum() / denom,
            r_r.sum() / denom)


def bradley_terry_grad_wrt_head(h_c, h_r, r_c, r_r, margin, denom):
    """d loss / d w for r = h . w: sum_i -sigmoid(-z_i) (h_c,i - h_r,i) / denom, float64 [H]."""
    z = np.asarray(r_c, np.float64) - np.asarray(r_r, np.float64) - np.asarray(margin, np.float64)
    coef = -1.0 / (1.0 + np.exp(z))  # -sigmoid(-z)
    return (coef[:, None] * (np.asarray(h_c, np.float64) - np.asarray(h_r, np.float64))).sum(0) / denom


def pad(seqs, width, side, pad_id=0):
    ids = np.full((len(seqs), width), pad_id, np.int32)
    mask = np.zeros((len(seqs), width), np.int32)
    for i, s in enumerate(seqs):
        if side == "right":
            ids[i, :len(s)], mask[i, :len(s)] = s, 1
        else:
            ids[i, width - len(s):], mask[i, width - len(s):] = s, 1
    return ids, mask


def random_sequences(rng, lengths, vocab=192):
    return [rng.integers(3, vocab, size=n).astype(np.int32) for n in lengths]  # 0 = pad, 1/2 = bos/eos


# ---------------------------------------------------------------------------------------------
# 1. the Bradley-Terry pairwise loss cell

@pytest.fixture
def reward_net(pynative_mode):
    """A random tiny reward model (its score head random too, so the scores are not all zero)."""
    from mindrl.models.lm import build_network
    net = build_network(tiny_model_config(), "reward", seed=5)
    net.set_train(False)
    return net


def pair_batch(rng, n=6, width=16):
    chosen = random_sequences(rng, rng.integers(3, 14, size=n))
    rejected = random_sequences(rng, rng.integers(3, 14, size=n))
    return pad(chosen, width, "right") + pad(rejected, width, "right")


def last_hidden(net, ids, mask):
    """The backbone's hidden state at each row's last real token (right padding), float64 [B, H]."""
    from mindspore import Tensor
    h = net.model(Tensor(ids), Tensor(mask)).asnumpy().astype(np.float64)
    return h[np.arange(len(ids)), mask.sum(1) - 1]


@pytest.mark.parametrize("with_margin", [False, True])
def test_pairwise_loss_and_metrics_match_float64(reward_net, rng, with_margin):
    from mindspore import Tensor
    from mindrl.trainer.reward_training import PairwiseLossCell
    c_ids, c_mask, r_ids, r_mask = pair_batch(rng)
    # margins in the middle and far in both tails (softplus must stay finite and exact there)
    margin = (np.array([0.5, -1.0, 2.0, 60.0, -60.0, 0.0], np.float32) if with_margin
              else np.zeros(6, np.float32))
    denom = 10.0  # the global batch's pair count: this micro-batch is 6 of 10 pairs
    cell = PairwiseLossCell(reward_net)
    outs = [float(o.asnumpy()) for o in cell(Tensor(c_ids), Tensor(c_mask), Tensor(r_ids), Tensor(r_mask),
                                             Tensor(margin), Tensor(np.float32(denom)))]
    assert outs[0] == outs[1]  # the loss, then the loss as the first metric
    r_c = reward_net(Tensor(c_ids), Tensor(c_mask)).asnumpy()
    r_r = reward_net(Tensor(r_ids), Tensor(r_mask)).asnumpy()
    assert np.abs(r_c - r_r).min() > 1e-4, "degenerate batch: a tie decides accuracy by rounding"
    want = bradley_terry_reference(r_c, r_r, margin, denom)
    assert 0 < want[1] < 0.6  # some pairs ranked right, some wrong
    names = [name for name, _ in PairwiseLossCell.METRICS]
    assert names == ["loss", "accuracy", "margin_mean", "chosen_mean", "rejected_mean"]
    for name, got, ref in zip(names, outs[1:], want):
        assert got == pytest.approx(ref, rel=1e-5, abs=1e-6), name
    assert np.isfinite(outs[0])


@pytest.mark.parametrize("head", ["zero", "random"])
def test_pairwise_loss_gradient(reward_net, rng, head):
    """The gradient of the score head equals the float64 derivative of -log sigmoid(z). With a zero head every pair
    starts at r_c == r_r (z = 0), where softplus' derivative is -1/2: relu + log1p(exp(-|z|)) would give 0 there."""
    import mindspore as ms
    from mindspore import Tensor
    from mindrl.trainer.reward_training import PairwiseLossCell
    w = reward_net.score.weight
    if head == "zero":
        w.set_data(Tensor(np.zeros(w.shape, np.float32)))
    c_ids, c_mask, r_ids, r_mask = pair_batch(rng)
    margin = np.zeros(6, np.float32) if head == "zero" else np.array([0.3, -0.2, 0, 1, 0, -1], np.float32)
    denom = 6.0
    cell = PairwiseLossCell(reward_net)
    grad_fn = ms.value_and_grad(cell, None, ms.ParameterTuple([w]), has_aux=True)
    outs, (g,) = grad_fn(Tensor(c_ids), Tensor(c_mask), Tensor(r_ids), Tensor(r_mask), Tensor(margin),
                         Tensor(np.float32(denom)))
    r_c = reward_net(Tensor(c_ids), Tensor(c_mask)).asnumpy()
    r_r = reward_net(Tensor(r_ids), Tensor(r_mask)).asnumpy()
    if head == "zero":
        assert np.all(r_c == 0) and np.all(r_r == 0)
        assert float(outs[0].asnumpy()) == pytest.approx(np.log(2.0), rel=1e-6)
    want = bradley_terry_grad_wrt_head(last_hidden(reward_net, c_ids, c_mask), last_hidden(reward_net, r_ids, r_mask),
                                       r_c, r_r, margin, denom)
    got = g.asnumpy().reshape(-1)  # stored [hidden, 1]
    assert np.abs(want).max() > 1e-3
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# shared files: a tiny policy, prompts, preference pairs (with a margin column), written as the docs say

def write_pairs(path, ids, seed, with_margin):
    """examples/tiny/task.py's pairs (right answer chosen, a plausible mistake rejected), plus a margin column."""
    import task
    rng = random.Random(seed)
    with open(path, "w") as fh:
        for pid in ids:
            prompt, answer = task.problem(pid)
            row = {"prompt": prompt, "chosen": answer, "rejected": task.wrong_answer(pid, rng)}
            if with_margin:
                row["margin"] = rng.choice([0.0, 0.5, 2.0, -1.0, 8.0])
            fh.write(json.dumps(row) + "\n")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    import task
    from conftest import make_grpo_workdir
    from mindrl.data.preprocess import cli_main
    d = make_grpo_workdir(tmp_path_factory.mktemp("ppo"))
    write_pairs(d / "pairs.jsonl", task.training_ids(16, seed=21), seed=3, with_margin=True)
    write_pairs(d / "pairs_heldout.jsonl", task.heldout_ids()[:8], seed=4, with_margin=False)
    for name, extra in (("pairs", ["dataset_additional_keys=[margin]"]), ("pairs_heldout", [])):
        rc = cli_main(["--config", PAIRS_DATASET, f"input={d / name}.jsonl", f"output_prefix={d / name}",
                       f"tokenizer_name_or_path={TOKENIZER}", *extra])
        assert rc == 0
    return d


def rm_yaml(d, name, **sections):
    """A `mindrl train-rm` yaml on the workdir; ``sections`` update its sections."""
    doc = {"rm_config": dict(model=str(d / "policy"), tokenizer_name_or_path=TOKENIZER, lr=0.01),
           "train": dict(global_batch_size=8, micro_batch_size=4, train_iters=1),
           "data": dict(path=str(d / "pairs.mindrecord"), shuffle=False),
           "logging": dict(log_dir=str(d / name), tensorboard=False)}  # the model: <log_dir>/model
    for section, values in sections.items():
        doc.setdefault(section, {}).update(values)
    path = d / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


@pytest.mark.parametrize("margin_key", [None, "margin"])
def test_train_step_metrics_match_float64(workdir, margin_key):
    """One `mindrl train-rm` step on a pairwise MindRecord (two micro-batches of one global batch): its reported
    loss and metrics are the float64 Bradley-Terry values of the scores before the step, with the margin column
    read from the data when data.margin_key names it."""
    import mindspore as ms
    from mindspore import Tensor
    from mindrl.config.reward_training import load_reward_training_config
    from mindrl.trainer.reward_training import RewardModelTrainer
    prev = ms.get_context("mode")
    try:
        cfg = load_reward_training_config(rm_yaml(workdir, f"rm_step_{margin_key}", runtime={"mode": "pynative"},
                                                  data={"margin_key": margin_key}))
        trainer = RewardModelTrainer(cfg)  # rm_config.load null: random backbone and head
        batch = next(trainer._batches())
        n = len(batch["chosen_ids"])
        margins = (np.array([float(m) for m in batch["margin"]]) if margin_key else np.zeros(n))
        if margin_key:
            assert len(set(margins.tolist())) > 2, "the margin column must vary"
        score = lambda seq: float(trainer.net(Tensor(seq[None].astype(np.int32)),  # noqa: E731
                                              Tensor(np.ones((1, len(seq)), np.int32))).asnumpy()[0])
        r_c = np.array([score(s) for s in batch["chosen_ids"]])
        r_r = np.array([score(s) for s in batch["rejected_ids"]])
        metrics = trainer.train_step(batch, 0)
    finally:
        ms.set_context(mode=prev)
    want = bradley_terry_reference(r_c, r_r, margins, n)
    for name, ref in zip(("loss", "accuracy", "margin_mean", "chosen_mean", "rejected_mean"), want):
        assert metrics[f"rm/{name}"] == pytest.approx(ref, rel=1e-4, abs=1e-5), name
    assert metrics["rm/grad_norm"] > 0


# ---------------------------------------------------------------------------------------------
# 2. where the score is read

def test_score_is_read_at_the_last_real_token_whatever_the_padding(reward_net, rng):
    """Left-, right- and both-side-padded batches (rollouts: left-padded prompt, right-padded response) score each
    sequence as it scores alone, unpadded; and the score is the per-token value at its last token."""
    from mindspore import Tensor
    from mindrl.models.lm import build_network
    seqs = random_sequences(rng, [5, 9, 1, 13, 7])
    alone = np.array([float(reward_net(Tensor(s[None]), Tensor(np.ones((1, len(s)), np.int32))).asnumpy()[0])
                      for s in seqs])
    assert np.ptp(alone) > 1e-3
    value_net = build_network(tiny_model_config(), "value", seed=5)  # same seed: the same weights
    last_value = np.array([value_net(Tensor(s[None]), Tensor(np.ones((1, len(s)), np.int32))).asnumpy()[0, -1]
                           for s in seqs])
    np.testing.assert_allclose(alone, last_value, rtol=1e-5, atol=1e-6)
    for side in ("left", "right"):
        ids, mask = pad(seqs, 16, side)
        got = reward_net(Tensor(ids), Tensor(mask)).asnumpy()
        np.testing.assert_allclose(got, alone, rtol=1e-5, atol=1e-5, err_msg=side)
    # prompt | response split: prompts left-padded to 8, responses right-padded to 8
    split = [min(3, len(s)) for s in seqs]
    p_ids, p_mask = pad([s[:k] for s, k in zip(seqs, split)], 8, "left")
    r_ids, r_mask = pad([s[k:] for s, k in zip(seqs, split)], 12, "right")
    got = reward_net(Tensor(np.concatenate([p_ids, r_ids], 1)), Tensor(np.concatenate([p_mask, r_mask], 1))).asnumpy()
    np.testing.assert_allclose(got, alone, rtol=1e-5, atol=1e-5, err_msg="both sides")


# ---------------------------------------------------------------------------------------------
# 3. `mindrl train-rm` -> HF sequence-classification directory -> transformers, RewardScorer, PPO

@pytest.fixture(scope="module")
def trained_rm(workdir):
    """`mindrl train-rm` for two steps from the tiny policy's backbone (a new zero head), with held-out pairs."""
    from mindrl.cli import main
    config = rm_yaml(workdir, "rm", rm_config={"load": str(workdir / "policy"), "lr": 0.1},
                     train={"global_batch_size": 8, "micro_batch_size": 8, "train_iters": 2},
                     eval={"path": str(workdir / "pairs_heldout.mindrecord")})
    assert main(["train-rm", "--config", config]) == 0
    return workdir / "rm" / "model"


@pytest.fixture(scope="module")
def hf_reward_model(trained_rm):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model, info = transformers.AutoModelForSequenceClassification.from_pretrained(
        str(trained_rm), dtype=torch.float32, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    return model.eval()


def hf_scores(model, seqs):
    import torch
    with torch.no_grad():
        return np.array([float(model(torch.tensor(np.asarray(s, np.int64)[None])).logits[0, 0]) for s in seqs])


def heldout_sequences(d, limit):
    import mindspore.dataset as mds
    rows = list(mds.MindDataset(str(d / "pairs_heldout.mindrecord"), columns_list=["chosen_ids", "rejected_ids"],
                                shuffle=False).create_dict_iterator(output_numpy=True, num_epochs=1))[:limit]
    return [r["chosen_ids"] for r in rows], [r["rejected_ids"] for r in rows]


def ppo_settings(d, yaml_path=PPO_RM_YAML, **over):
    """tiny_run_settings on ``yaml_path``, 3 steps; for the reward-model yaml: normalize off, one critic warm-up
    step (its 5 would be longer than the run) and the critic started from the reward model (the default the
    example overrides), unless asked."""
    from conftest import tiny_run_settings
    settings = tiny_run_settings(d, d / "ppo_logs", **{"rl_config.train_iters": 3})
    if yaml_path == PPO_RM_YAML:
        settings.update({"reward_config.normalize": "false", "rl_config.critic_warmup": 1,
                         "critic_config.load": "null"})
    settings.update(over)
    return settings


def ppo_config(d, yaml_path=PPO_RM_YAML, **over):
    from conftest import as_overrides
    from mindrl.config import load_train_config
    return load_train_config(yaml_path, as_overrides(ppo_settings(d, yaml_path, **over)))


@pytest.mark.slow
def test_export_loads_in_transformers_with_mindrl_scores(workdir, trained_rm, hf_reward_model):
    """transformers' AutoModelForSequenceClassification (torch float32) reads the directory `mindrl train-rm` wrote
    and scores sequences as mindrl's RewardScorer does on a rollout batch (left-padded prompts, right-padded
    responses, micro-batches), raw and normalised with the statistics in config.json."""
    from mindrl.trainer.context import RunContext
    from mindrl.trainer.experience import Experience
    from mindrl.trainer.preflight import preflight
    from mindrl.trainer.roles import RewardScorer
    assert type(hf_reward_model).__name__ == "Qwen2ForSequenceClassification"
    assert hf_reward_model.config.num_labels == 1
    chosen, rejected = heldout_sequences(workdir, 3)
    seqs = chosen + rejected[:2]
    prompt_len = [len(s) - 2 for s in seqs]  # the answer's last digit + end-of-text as the "response"
    prompt_len[0] -= 2
    want = hf_scores(hf_reward_model, seqs)
    assert np.ptp(want) > 1e-2, "the trained reward model should tell the sequences apart"
    doc = json.loads((trained_rm / "config.json").read_text())
    for normalize in (False, True):
        cfg = ppo_config(workdir, **{"reward_config.load": str(trained_rm), "reward_config.micro_batch_size": 2,
                                     "reward_config.normalize": str(normalize).lower()})
        preflight(cfg)
        run = RunContext.create(cfg)
        exp = Experience.from_rollout([s[:k] for s, k in zip(seqs, prompt_len)],
                                      [s[k:] for s, k in zip(seqs, prompt_len)],
                                      [np.zeros(len(s) - k) for s, k in zip(seqs, prompt_len)], [True] * len(seqs),
                                      list(range(len(seqs))), [0.0] * len(seqs), [0.0] * len(seqs), {}, 16, 8,
                                      run.pad_id)
        assert exp.prompt_mask[:, 0].sum() == 0 and exp.response_mask[:, -1].sum() == 0  # padded on both sides
        got = RewardScorer(run, run.plan.roles["reward_model"]).score(exp)
        ref = (want - doc["mean"]) / doc["std"] if normalize else want
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 / (doc["std"] if normalize else 1.0),
                                   err_msg=f"normalize={normalize}")


@pytest.mark.slow
def test_export_stores_the_heldout_reward_statistics(workdir, trained_rm, hf_reward_model):
    """config.json's mean/std (and the logged held-out metrics) are those of transformers' scores of the held-out
    chosen and rejected sequences, in float64."""
    from mindrl.trainer.roles.reward_model import reward_statistics
    doc = json.loads((trained_rm / "config.json").read_text())
    assert doc["architectures"] == ["Qwen2ForSequenceClassification"] and doc["num_labels"] == 1
    assert doc["pad_token_id"] == 0 and doc["vocab_size"] == 192
    chosen, rejected = heldout_sequences(workdir, 8)
    r_c, r_r = hf_scores(hf_reward_model, chosen), hf_scores(hf_reward_model, rejected)
    both = np.concatenate([r_c, r_r])
    assert doc["mean"] == pytest.approx(both.mean(), abs=1e-5)
    assert doc["std"] == pytest.approx(both.std(ddof=1), rel=1e-4, abs=1e-6)
    assert reward_statistics(str(trained_rm)) == (doc["mean"], doc["std"])
    with open(workdir / "rm" / "metrics.jsonl") as fh:
        after = [json.loads(line) for line in fh][-1]  # the eval after training is logged last
    assert after["rm/num_pairs"] == 8
    want = {"rm/accuracy": (r_c > r_r).mean(), "rm/margin_mean": (r_c - r_r).mean(), "rm/chosen_mean": r_c.mean(),
            "rm/rejected_mean": r_r.mean(), "rm/reward_mean": both.mean(), "rm/reward_std": both.std(ddof=1)}
    for key, ref in want.items():
        assert after[key] == pytest.approx(ref, rel=1e-4, abs=1e-5), key


@pytest.mark.slow
def test_train_rm_stopped_and_resumed_ends_as_an_uninterrupted_run(workdir):
    """Issue 23 item 2: `mindrl train-rm` stopped by SIGINT after step 3 saves a checkpoint and prints the command
    that resumes; that command, as printed, ends with the same weights and the same metrics as a run never stopped."""
    from conftest import stop_then_resume
    from mindrl.config.reward_training import load_reward_training_config
    from mindrl.models.weights import TensorSource
    from mindrl.trainer.reward_training import RewardModelTrainer, cli_main

    def config(name):
        return rm_yaml(workdir, name, rm_config={"load": str(workdir / "policy"), "lr": 0.05,
                                                 "save": "<run_dir>/ckpt", "save_interval": 2},
                       train={"global_batch_size": 4, "micro_batch_size": 2, "train_iters": 6},
                       data={"shuffle": True, "margin_key": "margin"},
                       eval={"path": str(workdir / "pairs_heldout.mindrecord")})
    assert cli_main(["--config", config("rm_whole")]) == 0
    stop_then_resume(RewardModelTrainer(load_reward_training_config(config("rm_stopped"))), cli_main, "train-rm")

    def rows(name):
        return [json.loads(line) for line in open(workdir / name / "metrics.jsonl")]
    whole, resumed = rows("rm_whole"), rows("rm_stopped")
    assert [r["step"] for r in resumed] == [r["step"] for r in whole] == [0, 1, 2, 3, 4, 5, 6, 6]
    for a, b in zip(whole, resumed):
        assert a.keys() == b.keys()
        for key in a:
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-6), (a["step"], key)
    want, got = TensorSource(str(workdir / "rm_whole" / "model")), TensorSource(str(workdir / "rm_stopped" / "model"))
    assert sorted(want.names()) == sorted(got.names())
    for name in want.names():
        np.testing.assert_allclose(got.get(name), want.get(name), rtol=1e-5, atol=1e-6, err_msg=name)
    assert json.loads((workdir / "rm_stopped" / "model" / "config.json").read_text())["mean"] == pytest.approx(
        json.loads((workdir / "rm_whole" / "model" / "config.json").read_text())["mean"], rel=1e-5)


@pytest.mark.slow
def test_ppo_config_on_the_exported_reward_model_passes_preflight(workdir, trained_rm):
    from mindrl.trainer.preflight import preflight
    cfg = ppo_config(workdir, **{"reward_config.load": str(trained_rm), "reward_config.normalize": "true"})
    preflight(cfg)
    assert cfg.reward_config.model == str(trained_rm)   # the architecture from its config.json
    assert cfg.critic_config.model == str(trained_rm)   # the critic starts from the reward model (OpenRLHF)
    from mindrl.config.plan import critic_weights
    w = critic_weights(cfg)
    assert (w.path, w.part) == (str(trained_rm), "policy")


# ---------------------------------------------------------------------------------------------
# 4. refusals before anything is built

@pytest.fixture(scope="module")
def model_dirs(workdir):
    """Sequence-classification directories written as `mindrl train-rm` writes them (random weights):
    ok (with stored statistics), nostats, badhead (score [2, H]), wide (hidden 48: a fine reward model, but not
    the weights of a hidden-32 config), vocab211."""
    from mindrl.models.lm import build_network
    from mindrl.models.weights import state_numpy
    from mindrl.runtime import setup_context
    from mindrl.trainer.roles.base import export_hf
    from mindrl.trainer.roles.critic import value_model_hf_config
    setup_context("graph")
    out = {"policy": workdir / "policy"}
    for name, cfg, extra in (("ok", tiny_model_config(), {"mean": 0.25, "std": 2.0}),
                             ("nostats", tiny_model_config(), {}),
                             ("badhead", tiny_model_config(), {"mean": 0.0, "std": 1.0}),
                             ("wide", tiny_model_config(hidden_size=48, num_heads=6, n_kv_heads=2), {}),
                             ("vocab211", tiny_model_config(vocab_size=211), {"mean": 0.0, "std": 1.0})):
        tensors = state_numpy(build_network(cfg, "reward", seed=1))
        if name == "badhead":
            tensors["score.weight"] = np.zeros((2, cfg.hidden_size), np.float32)
        export_hf(tensors, cfg, str(workdir / f"dir_{name}"), value_model_hf_config(cfg, 0, extra), TOKENIZER)
        out[name] = workdir / f"dir_{name}"
    return out


def error_lines(err, source, key):
    return [line for line in str(err).splitlines() if line.startswith(f"{source}: {key}: ")]


# (yaml, overrides with {dir} placeholders, key named, fragments of its line)
PREFLIGHT_CASES = {
    "reward model without a score head": (
        PPO_RM_YAML, {"reward_config.load": "{policy}"}, "reward_config.load", ["has no score head", "score.weight"]),
    "reward model with a [2, H] score head": (
        PPO_RM_YAML, {"reward_config.load": "{badhead}"}, "reward_config.load",
        ["'score.weight'", "[2, 32]", "[1, 32]"]),
    "reward weights of another hidden size than its config": (
        PPO_RM_YAML, {"reward_config.load": "{wide}", "reward_config.model": "{ok}"}, "reward_config.load",
        ["model.embed_tokens.weight", "[192, 48]", "[192, 32]"]),
    "reward model vocabulary": (
        PPO_RM_YAML, {"reward_config.load": "{vocab211}"}, "reward_config.model", ["vocab_size 211", "192"]),
    "normalize without statistics": (
        PPO_RM_YAML, {"reward_config.load": "{nostats}", "reward_config.normalize": "true"}, "reward_config.normalize",
        ["stores no reward mean/std", "normalize: false"]),
    "critic vocabulary": (
        PPO_YAML, {"critic_config.model": "{vocab211}", "critic_config.load": "{vocab211}"}, "critic_config.model",
        ["vocab_size 211", "192"]),
    "critic weights of another hidden size than its config": (
        PPO_YAML, {"critic_config.model": "{policy}", "critic_config.load": "{wide}"}, "critic_config.load",
        ["model.embed_tokens.weight", "[192, 48]", "[192, 32]"]),
}

PPO_BASE = {"rl_config.adv_estimator": "gae", "rl_config.critic_warmup": 1}  # tiny_run_settings is a GRPO run's


def fill(over, dirs):
    return {k: v.format(**{n: str(p) for n, p in dirs.items()}) for k, v in over.items()}


@pytest.mark.parametrize("case", list(PREFLIGHT_CASES))
def test_preflight_refuses_files_that_do_not_fit(workdir, model_dirs, case):
    from mindrl.config import ConfigError
    from mindrl.trainer.preflight import preflight
    yaml_path, over, key, fragments = PREFLIGHT_CASES[case]
    cfg = ppo_config(workdir, yaml_path, **{**PPO_BASE, **fill(over, model_dirs)})  # the config itself is valid
    with pytest.raises(ConfigError) as info:
        preflight(cfg, source="ppo.yaml")
    lines = error_lines(info.value, "ppo.yaml", key)
    assert lines, str(info.value)
    assert any(all(f in line for f in fragments) for line in lines), (fragments, str(info.value))


@pytest.mark.parametrize("over", [{"reward_config.load": "{ok}", "reward_config.normalize": "true"},
                                  {"reward_config.load": "{wide}"},  # its own hidden size: only the vocab must fit
                                  {"reward_config.load": "{ok}", "critic_config.load": "{wide}"}])
def test_preflight_accepts_reward_and_critic_models_that_fit(workdir, model_dirs, over):
    from mindrl.trainer.preflight import preflight
    cfg = ppo_config(workdir, **{**PPO_BASE, **fill(over, model_dirs)})
    preflight(cfg)
    if "critic_config.load" in over:
        assert cfg.critic_config.model == str(model_dirs["wide"])  # its architecture is its weights'


def test_trainer_refuses_before_building_anything(workdir, model_dirs, monkeypatch):
    """RLTrainer runs preflight first: no run context (topology, tokenizer), no network, no compile."""
    from mindrl.config import ConfigError
    from mindrl.trainer import RLTrainer
    from mindrl.trainer.context import RunContext

    def built(*_a, **_k):
        raise AssertionError("the run was being built before the refusal")
    monkeypatch.setattr(RunContext, "create", classmethod(built))
    cfg = ppo_config(workdir, **{**PPO_BASE, "reward_config.load": str(model_dirs["badhead"])})
    with pytest.raises(ConfigError) as info:
        RLTrainer(cfg)
    assert "reward_config.load" in str(info.value) and "score.weight" in str(info.value)


# config rules: refused by the loader (yaml, overrides, key, fragments)
CONFIG_CASES = {
    "reward_config.load missing on disk": (
        PPO_RM_YAML, {"reward_config.load": "{policy}_missing"}, "reward_config.load", ["checkpoint not found"]),
    "gae without a critic": (
        GRPO_YAML, {"rl_config.adv_estimator": "gae"}, "rl_config.adv_estimator", ["needs a critic", "critic_config"]),
    "critic_warmup without a critic": (
        GRPO_YAML, {"rl_config.critic_warmup": "1"}, "rl_config.critic_warmup", ["has no effect", "no critic"]),
    "cliprange_value without a critic": (
        GRPO_YAML, {"rl_config.cliprange_value": "0.3"}, "rl_config.cliprange_value", ["has no effect", "no critic"]),
    "a critic the estimator would ignore": (
        PPO_YAML, {"rl_config.adv_estimator": "grpo", "rl_config.gamma": "1.0", "rl_config.lam": "0.95",
                   "rl_config.critic_warmup": "0", "rl_config.cliprange_value": "0.5"},
        "critic_config", ["only adv_estimator gae trains a critic"]),
    "critic warm-up longer than the run": (
        PPO_YAML, {"rl_config.critic_warmup": "3"}, "rl_config.critic_warmup", ["never be updated"]),
}


@pytest.mark.parametrize("case", list(CONFIG_CASES))
def test_config_rules_refuse(workdir, case):
    from conftest import as_overrides
    from mindrl.config import ConfigError, load_train_config
    yaml_path, over, key, fragments = CONFIG_CASES[case]
    settings = ppo_settings(workdir, yaml_path, **fill(over, {"policy": workdir / "policy"}))
    with pytest.raises(ConfigError) as info:
        load_train_config(yaml_path, as_overrides(settings))
    lines = error_lines(info.value, yaml_path, key)
    assert lines and any(all(f in line for f in fragments) for line in lines), str(info.value)


def test_reward_config_without_load_is_refused(workdir, tmp_path):
    from conftest import as_overrides
    from mindrl.config import ConfigError, load_train_config
    doc = yaml.safe_load(open(PPO_RM_YAML))
    del doc["reward_config"]["load"]
    path = tmp_path / "ppo.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as info:
        load_train_config(path, as_overrides(ppo_settings(workdir)))
    assert error_lines(info.value, str(path), "reward_config.load"), str(info.value)


CLI_PROBE = ("import sys; from mindrl.cli import main; rc = main(sys.argv[1:]); "
             "print('mindspore imported:', 'mindspore' in sys.modules); sys.exit(rc)")


@pytest.mark.parametrize("case, over, key, fragment", [
    ("preflight", {"reward_config.load": "badhead"}, "reward_config.load", "'score.weight' has shape [2, 32]"),
    ("config rule", {"reward_config.load": "ok", "rl_config.adv_estimator": "grpo"}, "critic_config",
     "only adv_estimator gae trains a critic")])
def test_cli_exits_2_with_one_line_per_error(workdir, model_dirs, case, over, key, fragment):
    """`mindrl train --config ...` prints `mindrl: config error:` and one line naming the file and key, exits 2,
    and never imports MindSpore."""
    from conftest import as_overrides
    over = {k: (str(model_dirs[v]) if k == "reward_config.load" else v) for k, v in over.items()}
    if case == "config rule":  # keys only gae reads, cleared so that the one error left is the critic's
        over.update({"rl_config.gamma": "1.0", "rl_config.lam": "0.95", "rl_config.critic_warmup": "0",
                     "rl_config.cliprange_value": "0.5"})
    settings = ppo_settings(workdir, **{**PPO_BASE, **over})
    proc = subprocess.run([sys.executable, "-c", CLI_PROBE, "train", "--config", PPO_RM_YAML,
                           *as_overrides(settings)], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "GLOG_v": "3"})
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[0] == "mindrl: config error:", proc.stderr
    assert len(lines) == 2 and lines[1].startswith(f"{PPO_RM_YAML}: {key}: ") and fragment in lines[1], proc.stderr
    assert "Traceback" not in proc.stderr
    assert "mindspore imported: False" in proc.stdout


@pytest.mark.parametrize("over, key, fragment", [
    ({"rm_config": {"overwrite": True}}, "rm_config.overwrite", "written into the run directory, <run_dir>/model"),
    ({"rm_config": {"save_interval": 5}}, "rm_config.save_interval", "rm_config.save is not set"),
    ({"rm_config": {"finetune": False}}, "rm_config.load", "the train-rm checkpoint to resume"),
    ({"rm_config": {"save": "ckpt/<run_dir>"}}, "rm_config.save", "<run_dir> stands for the run directory")])
def test_train_rm_cli_refuses_keys_that_do_not_fit(workdir, capsys, over, key, fragment):
    """train-rm writes its model into its run directory (<run_dir>/model), so rm_config.overwrite (which replaced a
    fixed output directory silently) is gone, and says what replaced it; checkpoint keys need rm_config.save."""
    from mindrl.trainer.reward_training import cli_main
    config = rm_yaml(workdir, f"rm_refused_{key.split('.')[1]}", **over)
    assert cli_main(["--config", config]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == "mindrl: config error:" and len(err) == 2, err
    assert err[1].startswith(f"{config}: {key}: ") and fragment in err[1], err[1]
    assert not (workdir / f"rm_refused_{key.split('.')[1]}").exists()  # refused before anything was written


def test_train_rm_save_null_turns_checkpoints_off():
    """`rm_config.save=null` on the example (which sets save_interval) turns checkpoints off, accepted: the user
    said so; a save_interval without any save is refused (above)."""
    from mindrl.config.reward_training import load_reward_training_config
    cfg = load_reward_training_config(os.path.join(ROOT, "examples", "rm", "tiny_math.yaml"), ["rm_config.save=null"],
                                      check_paths=False)
    assert cfg.rm_config.save is None


def test_critic_load_from_a_mindrl_checkpoint(workdir, model_dirs):
    """critic_config.load may be a mindrl checkpoint (Critic loads weights_path(load, "critic")); with
    critic_config.model left null, its architecture should come from the checkpoint's critic, and preflight pass."""
    import shutil
    from mindrl.trainer.preflight import preflight
    root = workdir / "prev_run"
    it = root / "iter_0000004"
    shutil.rmtree(root, ignore_errors=True)
    it.mkdir(parents=True)
    (root / "latest_checkpointed_iteration.txt").write_text("4")
    (it / "trainer_state.json").write_text("{}")
    shutil.copytree(model_dirs["policy"], it / "policy")
    shutil.copytree(model_dirs["ok"], it / "critic")
    from mindrl.manifest import write_manifest
    write_manifest(str(it), {"step": 4})  # what a real save seals it with (preflight checks it)
    from mindrl.models.weights import weights_path
    assert weights_path(str(root), "critic") == str(it / "critic")  # what Critic will load
    cfg = ppo_config(workdir, PPO_YAML, **{**PPO_BASE, "critic_config.load": str(root)})
    assert cfg.critic_config.model == str(it / "critic")
    preflight(cfg)


# ---------------------------------------------------------------------------------------------
# 5. a MindSpeed-RL-shaped PPO yaml

MINDSPEED_PPO = """\
# MindSpeed-RL's PPO trainer yaml layout (its megatron_training keys moved where mindrl reads them)
seed: 7
actor_config:
  model: {policy}
  tokenizer_name_or_path: {tokenizer}
  load: {policy}
  save: {out}/ckpt
  save_interval: 10
  lr: 1e-6
  min_lr: 1e-7
  lr_decay_style: cosine
  lr_warmup_fraction: 0.05
  weight_decay: 0.01
  clip_grad: 1.0
critic_config:
  lr: 5e-6
  min_lr: 5e-7
  lr_decay_style: cosine
  micro_batch_size: 2
rl_config:
  adv_estimator: gae
  gamma: 1
  lam: 0.95
  cliprange_value: 0.2
  critic_warmup: 2
  kl_ctrl_type: adaptive
  init_kl_coef: 0.05
  kl_target: 6
  kl_horizon: 10000
  use_kl_in_reward: true
  kl_penalty: kl
  n_samples_per_prompt: 1
  global_batch_size: 8
  mini_batch_size: 4
  micro_batch_size: 2
  ppo_epochs: 2
  train_iters: 20
  clip_ratio: 0.2
  max_prompt_length: 16
  use_tensorboard: false
  integrated_mode_config:
    ref_model_load_path: {policy}
  verifier_function: [acc_for_ppo]
  verifier_weight: [1.0]
ref:
  model: {policy}
generate_config:
  infer_tensor_parallel_size: 1
  sampling_config:
    max_tokens: 6
    min_tokens: 1
    temperature: 0.9
    top_p: 0.95
    top_k: 50
data:
  path: {out}/prompts.mindrecord
  shuffle: false
"""


def test_mindspeed_rl_ppo_yaml_loads_into_typed_values(tmp_path):
    from mindrl.algorithms import make_kl_controller
    from mindrl.config import load_train_config
    for name in ("prompts.mindrecord", "prompts.mindrecord.db"):
        (tmp_path / name).write_text("")
    policy = os.path.join(ROOT, "examples", "tiny", "policy")
    path = tmp_path / "ppo_trainer_tiny.yaml"
    path.write_text(MINDSPEED_PPO.format(policy=policy, tokenizer=TOKENIZER, out=tmp_path))
    cfg = load_train_config(path)
    rl, actor, critic, gen = cfg.rl_config, cfg.actor_config, cfg.critic_config, cfg.generate_config
    want_rl = dict(adv_estimator="gae", gamma=1.0, lam=0.95, cliprange_value=0.2, critic_warmup=2,
                   kl_ctrl_type="adaptive", kl_coef=0.05, kl_target=6.0, kl_horizon=10000, use_kl_in_reward=True,
                   use_kl_in_loss=False, kl_penalty="kl", n_samples_per_prompt=1, global_batch_size=8,
                   mini_batch_size=4, micro_batch_size=2, ppo_epochs=2, train_iters=20, clip_ratio=0.2,
                   clip_ratio_low=0.2, clip_ratio_high=0.2, advantage_whiten=True, verifier_function=["acc_for_ppo"],
                   verifier_weight=[1.0])
    for key, value in want_rl.items():
        got = getattr(rl, key)
        assert got == value and type(got) is type(value), (key, got)
    for key, value in dict(lr=1e-6, min_lr=1e-7, lr_decay_style="cosine", lr_warmup_fraction=0.05,
                           weight_decay=0.01, save_interval=10, finetune=True, load=policy, model=policy).items():
        got = getattr(actor, key)
        assert got == value and type(got) is type(value), ("actor_config", key, got)
    # the critic: its own optimizer; what it does not set comes from the actor or the policy
    for key, value in dict(lr=5e-6, min_lr=5e-7, lr_decay_style="cosine", micro_batch_size=2, finetune=True,
                           no_load_rng=False, load=None, model=policy, tensor_model_parallel_size=1).items():
        got = getattr(critic, key)
        assert got == value and type(got) is type(value), ("critic_config", key, got)
    assert cfg.reward_config is None
    assert (cfg.ref.ref_model_load_path, cfg.ref.model) == (policy, policy)
    assert (gen.max_prompt_length, gen.max_tokens, gen.min_tokens, gen.top_k) == (16, 6, 1, 50)
    assert (gen.temperature, gen.top_p) == (0.9, 0.95) and isinstance(gen.temperature, float)
    assert cfg.logging.tensorboard is False
    assert (cfg.runtime.seed, cfg.data.seed, cfg.data.shuffle) == (7, 7, False)
    ctrl = make_kl_controller(rl.kl_ctrl_type, rl.kl_coef, rl.kl_target, rl.kl_horizon)
    assert type(ctrl).__name__ == "AdaptiveKLController" and ctrl.value == 0.05
    # the alias and its canonical key together are one key given twice
    from mindrl.config import ConfigError
    path.write_text(path.read_text().replace("  init_kl_coef: 0.05\n", "  init_kl_coef: 0.05\n  kl_coef: 0.1\n"))
    with pytest.raises(ConfigError, match="rl_config.init_kl_coef conflicts with 0.1 from the file"):
        load_train_config(path)


@pytest.mark.parametrize("over, apart", [
    ([], "2 updates per step: the later ones read newer weights"),  # the example: 2 mini-batches
    (["rl_config.mini_batch_size=256"], ""),
    (["rl_config.mini_batch_size=256", "rl_config.ppo_epochs=2"], "2 updates per step: the later ones read newer weights"),
    (["rl_config.mini_batch_size=256", "generate_config.max_tokens=4096"], ""),  # long responses too
])
def test_the_plan_says_where_the_critics_values_come_from(over, apart):
    """One update per step: the critic's update gives the values; otherwise a value pass of their own, and the
    plan says why."""
    from mindrl.config import load_train_config
    from mindrl.config.plan import plan_run
    plan = plan_run(load_train_config(PPO_YAML, over, check_paths=False), 1)
    assert plan.batch.critic_values_in_update == (apart == "")
    values = [line.strip() for line in plan.lines() if line.strip().startswith("values: ")]
    assert values == ["values: from the critic's update, run before the advantages (a single update per step: its "
                      "forward reads the weights a value pass would)" if not apart else
                      f"values: a pass of their own before the updates ({apart})"]
