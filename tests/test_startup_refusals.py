"""Start-up failures that must stop `mindrl train` with exit status 2 and one line per problem, before anything
is built (issue 22 item 8): a dataset smaller than one batch, a model yaml with a non-number size, a model whose
weights cannot fit in memory, an eval row nested too deeply, a verifier timeout beyond any run, and a resume with
keys that decide which prompts come next changed."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    from conftest import make_grpo_workdir
    return make_grpo_workdir(tmp_path_factory.mktemp("refusals"))


def train(work, tmp_path, *over, timeout=600):
    from conftest import as_overrides, tiny_run_settings
    settings = tiny_run_settings(work, tmp_path / "logs")
    cmd = [sys.executable, "-m", "mindrl.cli", "train", "--config", os.path.join(ROOT, "examples", "grpo",
                                                                                   "tiny_math.yaml")]
    env = dict(os.environ, GLOG_v="3")
    return subprocess.run(cmd + as_overrides(settings) + list(over), cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=timeout)


def refused(res, key: str, *fragments):
    assert res.returncode == 2, res.stderr[-3000:]
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    problem = [line for line in lines if f": {key}: " in line]
    assert len(problem) == 1 and all(f in problem[0] for f in fragments), lines


def test_a_dataset_smaller_than_one_batch(work, tmp_path):
    refused(train(work, tmp_path, "rl_config.global_batch_size=512", "rl_config.mini_batch_size=512"), "data.path",
            "holds 256 prompts, fewer than one generation batch of 512")


def test_a_model_yaml_with_a_size_that_is_not_a_number(work, tmp_path):
    bad = tmp_path / "m.yaml"
    bad.write_text(open(os.path.join(ROOT, "model_configs", "tiny_qwen2.yaml")).read()
                   .replace("hidden_size: 128", "hidden_size: abc"))
    refused(train(work, tmp_path, f"actor_config.model={bad}", "actor_config.load=null"), "actor_config.model",
            "hidden_size: must be a positive integer, got 'abc'")


def test_a_model_that_cannot_fit_in_memory(work, tmp_path):
    bad = tmp_path / "v.yaml"
    bad.write_text(open(os.path.join(ROOT, "model_configs", "tiny_qwen2.yaml")).read()
                   .replace("vocab_size: 192", "vocab_size: 100000000000000"))
    res = train(work, tmp_path, f"actor_config.model={bad}", "actor_config.load=null",
                f"actor_config.tokenizer_name_or_path={os.path.join(ROOT, 'examples', 'tiny', 'tokenizer')}")
    refused(res, "actor_config.model", "GiB in float32, more than this machine's")


def test_an_eval_row_nested_too_deeply(work, tmp_path):
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"prompt": ' + "[" * 100000 + "]" * 100000 + ', "labels": "1"}\n')
    refused(train(work, tmp_path, f"eval.path={deep}"), "eval.path", "deep.jsonl:1: nested too deeply")


def test_a_verifier_timeout_beyond_any_run(work, tmp_path):
    refused(train(work, tmp_path, "rl_config.verifier_timeout=1e10"), "rl_config.verifier_timeout",
            "must be in (0, 86400]")


@pytest.mark.slow
def test_a_resume_with_keys_that_decide_the_prompts_changed(work, tmp_path):
    save = tmp_path / "ckpt"
    res = train(work, tmp_path, f"actor_config.save={save}", "logging.log_dir=" + str(tmp_path / "run1"))
    assert res.returncode == 0, res.stderr[-3000:]
    resume = [f"actor_config.save={save}", f"actor_config.load={save}", "actor_config.finetune=false",
              "rl_config.train_iters=2", "logging.log_dir=" + str(tmp_path / "run1")]
    for change, key, value in (("rl_config.global_batch_size=8", "rl_config.global_batch_size", "8, but the run"),
                               ("runtime.seed=7", "runtime.seed", "7, but the run"),
                               ("data.seed=7", "data.seed", "7, but the run")):
        refused(train(work, tmp_path, *resume, change, "rl_config.mini_batch_size=4"), key, value,
                "actor_config.finetune=true")


def test_a_reference_model_with_another_vocabulary(work, tmp_path):
    """The reference's vocabulary is checked with the policy's, before anything is built (it compares the two
    token by token)."""
    ref = tmp_path / "ref.yaml"
    ref.write_text(open(os.path.join(ROOT, "model_configs", "tiny_qwen2.yaml")).read()
                   .replace("vocab_size: 192", "vocab_size: 256"))
    refused(train(work, tmp_path, "rl_config.kl_coef=0.01", f"ref.model={ref}", "ref.ref_model_load_path=null"),
            "ref.model", "has vocab_size 256, the policy 192")
