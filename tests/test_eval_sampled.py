"""Sampled held-out evaluation (eval.n_samples, eval.temperature, eval.top_p): the pass@k estimator against a
brute-force enumeration, the refusal of samples without a temperature, and `mindrl evaluate` end to end (pass@k and
mean@n of the dump's own scores, the same numbers twice, one dump row per sample)."""
import itertools
import json
import os
import re
import subprocess
import sys
from fractions import Fraction
from math import comb

import numpy as np
import pytest

from mindrl.config.plan import pass_ks
from mindrl.trainer.evaluation import pass_at_k, sampled_metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "examples", "grpo", "tiny_math.yaml")


def brute_pass_at_k(n, c, k):
    """The share of the C(n, k) ways to pick k of n samples (the first c of which passed) that hold a passing one,
    counted one subset at a time, in float64."""
    hits = total = 0
    for subset in itertools.combinations(range(n), k):
        total += 1
        hits += any(i < c for i in subset)
    return np.float64(hits) / np.float64(total)


def test_pass_at_k_equals_the_enumeration_over_subsets():
    for n in range(1, 10):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(n, c, k), abs=1e-12), (n, c, k)
    assert pass_at_k(4, 1, 1) == 0.25 and pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 1, 4) == 1.0


def test_pass_at_k_is_stable_where_the_binomials_are_huge():
    """n = 1000: C(1000, 500) has 300 digits (a float overflows); the exact rational value is the reference."""
    for n, c, k in [(1000, 1, 1), (1000, 3, 500), (1000, 997, 2), (1000, 10, 64), (200, 0, 7)]:
        exact = 1 - Fraction(comb(n - c, k), comb(n, k))
        assert pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-12, abs=1e-15), (n, c, k)
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def test_reported_k_values():
    assert pass_ks(1) == [1] and pass_ks(2) == [1, 2] and pass_ks(4) == [1, 2, 4]
    assert pass_ks(6) == [1, 2, 4, 6] and pass_ks(10) == [1, 2, 4, 8, 10] and pass_ks(16) == [1, 2, 4, 8, 16]


def test_sampled_metrics_per_verifier_and_for_the_score():
    """3 prompts x 4 samples. A sample passes a verifier at a score of 1 or more (0.5, partial credit, does not),
    and passes `score` when it passes every verifier; means are over every sample."""
    acc = np.array([1, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0], np.float32)
    fmt = np.array([1, 1, 0.5, 0, 0, 1, 1, 1, 1, 1, 1, 1], np.float32)
    scores = acc + 0.5 * fmt
    out = sampled_metrics({"acc": acc, "fmt": fmt}, scores, 4, [1, 2, 4])
    both = [[1, 0, 0, 0], [0, 1, 1, 1], [0, 0, 0, 0]]  # acc and fmt both passed
    for name, ok in (("acc", acc.reshape(3, 4) >= 1), ("fmt", fmt.reshape(3, 4) >= 1), ("score", np.array(both))):
        for k in (1, 2, 4):
            want = np.mean([brute_pass_at_k(4, int(row.sum()), k) for row in ok])
            assert out[f"eval/{name}/pass@{k}"] == pytest.approx(want, abs=1e-12), (name, k)
    assert out["eval/acc/pass@1"] == pytest.approx(5 / 12) and out["eval/acc/pass@4"] == pytest.approx(2 / 3)
    assert out["eval/fmt/mean"] == out["eval/fmt/mean@4"] == pytest.approx(fmt.astype(np.float64).mean())
    assert out["eval/score/mean"] == pytest.approx(float(np.mean(scores, dtype=np.float64)))
    assert "eval/score/pass@1" not in sampled_metrics({}, np.zeros(8), 4, [1])  # nothing decides a pass


def _run(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "mindrl.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, GLOG_v="3"))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """Prompt and held-out MindRecords (the demo's first 16 held-out rows) made with `mindrl preprocess`."""
    from conftest import make_grpo_workdir
    return make_grpo_workdir(tmp_path_factory.mktemp("sampled"))


def _data(workdir):
    return [f"data.path={workdir / 'train.mindrecord'}", f"eval.path={workdir / 'heldout.mindrecord'}"]


def test_samples_without_a_temperature_are_refused_naming_the_key(workdir):
    res = _run("train", "--config", CONFIG, "eval.n_samples=4", *_data(workdir))
    assert res.returncode == 2, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert lines[0] == "mindrl: config error:" and len(lines) == 2, lines
    assert "eval.n_samples: 4 samples per held-out prompt need eval.temperature > 0" in lines[1]


def test_the_plan_names_the_sampled_evaluation():
    from mindrl.config import load_train_config
    from mindrl.config.plan import plan_run
    over = ["eval.n_samples=6", "eval.temperature=0.7", "eval.top_p=0.9"]
    text = plan_run(load_train_config(CONFIG, over, check_paths=False), 1).text()
    assert ("  held-out: 6 responses sampled per prompt at temperature 0.7, top_p 0.9 (eval.n_samples, "
            "eval.temperature), reported as pass@1, pass@2, pass@4, pass@6 and mean@6") in text.splitlines()
    assert "held-out:" not in plan_run(load_train_config(CONFIG, check_paths=False), 1).text()


def _check(result, text):
    """The printed metrics are those of the dump's own per-sample scores; returns the [prompt, sample] accuracies."""
    rows = [json.loads(line) for line in text.splitlines()]
    assert len(rows) == 16 * 4 and result["eval/num_samples"] == 16 and result["eval/n_samples"] == 4
    assert [(r["index"], r["sample"]) for r in rows] == [(i, j) for i in range(16) for j in range(4)]
    acc = np.array([r["verifiers"]["last_number"] for r in rows], np.float64).reshape(16, 4)
    assert set(np.unique(acc)) <= {0.0, 1.0}
    for r in rows:  # an independent check of the verifier: the response's last integer is the label
        found = re.findall(r"-?\d+", r["response"])
        assert (r["verifiers"]["last_number"] == 1.0) == bool(found and int(found[-1]) == int(r["label"])), r
    assert result["eval/last_number/mean"] == result["eval/last_number/mean@4"] == pytest.approx(acc.mean())
    for k in (1, 2, 4):
        want = np.mean([brute_pass_at_k(4, int(c), k) for c in acc.sum(1)])
        assert result[f"eval/last_number/pass@{k}"] == pytest.approx(want, abs=1e-12)
        assert result[f"eval/score/pass@{k}"] == result[f"eval/last_number/pass@{k}"]  # one verifier, weight 1
    assert result["eval/last_number/pass@1"] == pytest.approx(acc.mean())
    responses = np.array([r["response"] for r in rows]).reshape(16, 4)
    assert sum(len(set(row)) > 1 for row in responses) >= 8  # sampled, not greedy: a prompt's answers differ
    return acc


def test_evaluate_samples_scores_and_dumps_every_sample(workdir, tmp_path):
    """The shipped tiny policy on 16 held-out prompts x 4 samples at temperature 1: the metrics are those of the
    dump's own per-sample scores (pass@k by enumeration), pass@1 is the mean accuracy over samples, pass@4 is above
    it, the samples differ, and a second process gives the same numbers and samples. With 2 rows decoded at once
    (generate_config.micro_batch_size), the 4 samples are drawn in 2 rounds, and still land prompt-major."""
    args = ["evaluate", "--config", CONFIG, *_data(workdir), "eval.num_samples=16", "eval.n_samples=4",
            "eval.temperature=1.0"]
    runs = []
    # the training keys beside it keep the config valid for training: a rollout holds one prompt's samples at once
    rounds = ["generate_config.micro_batch_size=2", "rl_config.n_samples_per_prompt=2", "rl_config.micro_batch_size=32"]
    for name, extra in (("a", []), ("b", []), ("rounds", rounds)):
        dump = tmp_path / f"{name}.jsonl"
        res = _run(*args, *extra, "--dump", str(dump))
        assert res.returncode == 0, res.stderr[-2000:]
        assert f"wrote 64 predictions to {dump}" in res.stderr
        assert "(4 responses sampled per prompt at temperature 1;" in res.stderr
        runs.append((json.loads(res.stdout), dump.read_text()))
    assert runs[1] == runs[0]  # the same seed: the same samples, the same numbers
    acc = _check(*runs[0])
    assert runs[0][0]["eval/last_number/pass@4"] > runs[0][0]["eval/last_number/pass@1"] > 0
    assert acc.any(1).mean() == runs[0][0]["eval/last_number/pass@4"]
    _check(*runs[2])
