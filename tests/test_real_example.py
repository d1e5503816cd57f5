"""The real-model example's pieces (examples/real/): the task and its held-out set, the reward on known answers, and
the prompts `mindrl preprocess --config examples/real/data.yaml` writes, which must be the ids `transformers`'
`apply_chat_template` gives for the same question (the model's own chat format). Fast: a small BPE tokenizer with
SmolLM2's chat template stands in for the model's, and the real tokenizer is checked too when the example has
converted it (scratch/real/smollm2-hf)."""
import json
import os
import subprocess
import sys

import pytest

from test_preprocess import read_back

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "real"))
import addition  # noqa: E402

REAL_MODEL = os.path.join(ROOT, "scratch", "real", "smollm2-hf")


def test_task_rows_and_heldout_set():
    assert addition.question(47, 38) == "What is 47 + 38? Answer with the number only."
    assert addition.row(47, 38) == {"prompt": "What is 47 + 38? Answer with the number only.", "labels": "85"}
    held = addition.heldout_problems()
    assert len(held) == 200 == len(set(held))
    assert held == addition.heldout_problems()                # fixed: the same problems in every run
    assert addition.heldout_problems(1000)[:200] == held       # a smaller held-out set is a prefix of a larger one
    assert all(10 <= a <= 99 and 10 <= b <= 99 for a, b in held)
    train = addition.training_problems(5000, seed=1)
    assert not set(train) & set(addition.heldout_problems(1000))  # training never sees a held-out problem
    assert train == addition.training_problems(5000, seed=1) != addition.training_problems(5000, seed=2)


def test_task_writes_jsonl(tmp_path):
    addition.main(["--out", str(tmp_path), "--rows", "50", "--heldout", "20"])
    rows = [json.loads(x) for x in open(tmp_path / "train.jsonl")]
    held = [json.loads(x) for x in open(tmp_path / "heldout.jsonl")]
    assert len(rows) == 50 and len(held) == 20
    assert held == [addition.row(a, b) for a, b in addition.heldout_problems(20)]


@pytest.mark.parametrize("response, score", [
    ("85", 1.0), ("85.", 1.0), ("47 + 38 = 85", 1.0), ("The answer is 85.", 1.0), ("85.0", 1.0),
    ("84", 0.0), ("", 0.0), ("To solve this, we need to add 47 and 38.", 0.0),  # the last number is 38
    ("The answer is 8", 0.0),            # cut off by the token limit
    ("85, or 86", 0.0),                  # the last number counts
])
def test_reward_on_known_answers(response, score):
    """The example's reward is mindrl's last_number verifier, scored as the trainer scores it."""
    from mindrl.rewards import RewardComputer
    out = RewardComputer(["last_number"], [1.0])([response], ["85"])
    assert float(out.scores[0]) == score


def example_configs():
    import yaml
    grpo = yaml.safe_load(open(os.path.join(ROOT, "examples", "real", "grpo.yaml")))
    ppo = yaml.safe_load(open(os.path.join(ROOT, "examples", "real", "ppo.yaml")))
    data = yaml.safe_load(open(os.path.join(ROOT, "examples", "real", "data.yaml")))
    return grpo, ppo, data


def test_configs_agree_with_the_task():
    grpo, ppo, data = example_configs()
    assert data["prompt_type"] == "hf" and data["handler_name"] == "prompt"
    for cfg in (grpo, ppo):
        assert cfg["rl_config"]["verifier_function"] == ["last_number"]
        assert cfg["generate_config"]["max_tokens"] == 24  # the measure: up to 24 new tokens
        assert cfg["eval"]["path"] == "scratch/real/data/heldout.mindrecord"
        assert cfg["actor_config"]["model"] == cfg["actor_config"]["load"] == data["tokenizer_name_or_path"]
    assert grpo["rl_config"]["adv_estimator"] == "grpo" and ppo["rl_config"]["adv_estimator"] == "gae"
    assert "critic_config" in ppo


def smol_tokenizer_dir(directory):
    """A small BPE tokenizer directory with SmolLM2's special tokens and chat template (tests/data/chat_templates)."""
    from test_chat_template import make_dir
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [addition.question(a, b) for a, b in addition.all_problems()[::31]] + ["You are a helpful AI assistant"]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, show_progress=False,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return make_dir(directory, tok.to_str(), "smollm2")


@pytest.fixture(scope="module")
def smol_tokenizer(tmp_path_factory):
    pytest.importorskip("transformers")
    return smol_tokenizer_dir(tmp_path_factory.mktemp("smol_tok"))


def check_preprocessed_prompts(tokenizer_dir, tmp_path, *over):
    """The example's data config on a few task rows gives transformers' chat-template ids and the sums as labels."""
    import transformers
    from mindrl.data.preprocess import cli_main
    problems = addition.heldout_problems(12)
    addition.write_jsonl(str(tmp_path / "rows.jsonl"), problems)
    rc = cli_main(["--config", os.path.join(ROOT, "examples", "real", "data.yaml"), f"input={tmp_path}/rows.jsonl",
                   f"output_prefix={tmp_path}/rows", f"tokenizer_name_or_path={tokenizer_dir}", "--overwrite", *over])
    assert rc == 0
    rows = read_back(str(tmp_path / "rows.mindrecord"))
    hf = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    assert len(rows) == len(problems)
    for row, (a, b) in zip(rows, problems):
        want = hf.apply_chat_template([{"role": "user", "content": addition.question(a, b)}], add_generation_prompt=True,
                                      tokenize=True, return_dict=False)
        assert [int(x) for x in row["prompt_ids"]] == list(want)
        label = row["labels"]
        assert (label.decode() if isinstance(label, bytes) else str(label)) == str(a + b)
    return hf.decode(want)


def test_prompts_are_the_models_chat_format(smol_tokenizer, tmp_path):
    text = check_preprocessed_prompts(smol_tokenizer, tmp_path, "max_prompt_length=256")  # a smaller vocabulary
    assert text == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                    "<|im_end|>\n<|im_start|>user\n" + addition.question(*addition.heldout_problems(12)[-1]) +
                    "<|im_end|>\n<|im_start|>assistant\n")


def test_prompts_with_the_real_tokenizer(tmp_path):
    """The same on SmolLM2-135M-Instruct's own tokenizer, when examples/real/run.sh has converted the model."""
    pytest.importorskip("transformers")
    if not os.path.isfile(os.path.join(REAL_MODEL, "tokenizer.json")):
        pytest.skip("scratch/real/smollm2-hf not found: `bash examples/real/run.sh --prepare` makes it")
    text = check_preprocessed_prompts(REAL_MODEL, tmp_path)
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")


def test_run_script_parses():
    script = os.path.join(ROOT, "examples", "real", "run.sh")
    assert subprocess.run(["bash", "-n", script]).returncode == 0
    out = subprocess.run(["bash", script, "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--prepare" in out.stdout
