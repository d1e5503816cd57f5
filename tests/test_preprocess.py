"""`mindrl preprocess`: MindRecord contents read back through MindSpore's own MindDataset, with token
ids checked against sentencepiece / transformers on hand-written prompt text."""
import json
import logging
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from mindrl.data import handlers
from mindrl.data.preprocess import PreprocessConfigError, PreprocessError, cli_main, load_dataset_config, preprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "examples", "tiny", "tokenizer")
QWEN_SYSTEM = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
QWEN_CHAT_JINJA = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


@pytest.fixture(scope="module")
def sp():
    import sentencepiece as spm
    return spm.SentencePieceProcessor(model_file=os.path.join(TINY, "tokenizer.model"))


def read_back(path):
    import mindspore.dataset as ds
    return list(ds.MindDataset(str(path), shuffle=False).create_dict_iterator(output_numpy=True, num_epochs=1))


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write((row if isinstance(row, str) else json.dumps(row)) + "\n")
    return str(path)


def _config_file(tmp_path, **keys):
    """A yaml for the CLI: one row of the tiny task, output under tmp_path/o; ``keys`` override."""
    keys = {"input": str(write_jsonl(tmp_path / "d.jsonl", [{"prompt": "1+1=", "labels": "2"}])),
            "tokenizer_name_or_path": TINY, "output_prefix": f"{tmp_path}/o/data", "handler_name": "prompt", **keys}
    config = tmp_path / "c.yaml"
    config.write_text("".join(f"{k}: {v}\n" for k, v in keys.items()))
    return str(config)


def run(tmp_path, strict=False, overwrite=False, **cfg):
    cfg.setdefault("tokenizer_name_or_path", TINY)
    cfg.setdefault("output_prefix", str(tmp_path / "out" / "data"))
    return preprocess(load_dataset_config(None, extra=cfg), strict=strict, overwrite=overwrite)


def leftovers(directory):
    return [n for n in os.listdir(directory) if ".tmp-" in n] if os.path.isdir(directory) else []


def problems(n, start=0):
    return [{"problem": f"{i % 100:02d}+{(i * 7) % 100:02d}-{(i * 3) % 100:02d}=",
             "answer": str(i % 100 + (i * 7) % 100 - (i * 3) % 100),
             "solution": f"step {i}"} for i in range(start, start + n)]


# ------------------------------------------------------------------------------------- contents
def test_deepscaler_json_with_qwen_r1(tmp_path, sp):
    rows = problems(30)
    path = tmp_path / "deepscaler.json"
    path.write_text(json.dumps(rows))
    summary = run(tmp_path, input=str(path), handler_name="R1AlpacaStyleInstructionHandler", prompt_type="qwen_r1",
                  map_keys={"prompt": "problem", "query": "", "response": "answer", "system": ""},
                  dataset_additional_keys=["labels", "solution"])
    assert (summary.read, summary.written, summary.skipped_total) == (30, 30, 0)
    assert summary.output == str(tmp_path / "out" / "data.mindrecord")
    back = read_back(summary.output)
    assert len(back) == 30
    instruction = ("A conversation between User and Assistant. The user asks a question, and the Assistant solves "
                   "it. The assistant first thinks about the reasoning process in the mind and then provides the "
                   "user with the answer. The reasoning process and answer are enclosed within <think> </think> and "
                   "<answer> </answer> tags, respectively, i.e., <think> reasoning process here </think><answer> "
                   "answer here </answer>. Put your final answer within \\boxed{}.")
    for row, got in zip(rows, back):
        text = f"{QWEN_SYSTEM}<|im_start|>user\n{instruction}\n{row['problem']}<|im_end|>\n<|im_start|>assistant\n"
        expected = sp.encode(text)
        assert got["prompt_ids"].dtype == np.int32
        assert got["prompt_ids"].tolist() == expected
        assert int(got["prompt_length"]) == len(expected)
        assert str(got["labels"]) == row["answer"]
        assert str(got["solution"]) == row["solution"]
    assert set(back[0]) == {"prompt_ids", "prompt_length", "labels", "solution"}


def _hf_qwen_dir(directory):
    """A tiny Qwen-style BPE (vocab.json + merges.txt) with a chat template for transformers."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from mindrl.data.tokenizer import QWEN2_PRETOKENIZE_REGEX
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    corpus = ["Solve the following math problem step by step. The last line of your response should be "
              "of the form Answer: $Answer", "You are a helpful assistant.", "x^2 + 3x = 10, find x."] * 20
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=330, show_progress=False,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    os.makedirs(directory, exist_ok=True)
    tok.model.save(str(directory))
    n = tok.get_vocab_size()
    added = {str(n + i): {"content": t, "special": True}
             for i, t in enumerate(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])}
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "Qwen2Tokenizer", "added_tokens_decoder": added, "eos_token": "<|im_end|>",
                   "pad_token": "<|endoftext|>", "chat_template": QWEN_CHAT_JINJA}, f)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump({"model_type": "qwen2"}, f)
    return str(directory)


def test_dapo_parquet_matches_transformers_chat_template(tmp_path):
    transformers = pytest.importorskip("transformers")
    import pyarrow as pa
    import pyarrow.parquet as pq
    tok_dir = _hf_qwen_dir(tmp_path / "tok")
    rows = [{"data_source": "math_dapo",
             "prompt": [{"content": f"Solve the following math problem step by step.\n\nx^2 + {i}x = 10, find x.",
                         "role": "user"}],
             "ability": "MATH", "reward_model": {"ground_truth": str(i), "style": "rule-based"},
             "extra_info": {"index": f"id-{i}"}} for i in range(12)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "dapo-math-17k.parquet")
    summary = run(tmp_path, input=str(tmp_path / "dapo-math-17k.parquet"), tokenizer_name_or_path=tok_dir,
                  tokenizer_type="HuggingFaceTokenizer", handler_name="Math17kAlpacaStyleInstructionHandler",
                  prompt_type="qwen", dataset_additional_keys=["extra_info.index"])
    ref = transformers.AutoTokenizer.from_pretrained(tok_dir)
    back = read_back(summary.output)
    assert len(back) == 12
    for row, got in zip(rows, back):
        expected = ref.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True)
        if isinstance(expected, dict) or hasattr(expected, "keys"):
            expected = expected["input_ids"]
        assert got["prompt_ids"].tolist() == list(expected)
        assert str(got["labels"]) == row["reward_model"]["ground_truth"]
        assert str(got["data_source"]) == "math_dapo"
        assert str(got["extra_info_index"]) == row["extra_info"]["index"]


def test_gsm8k_labels(tmp_path, sp):
    rows = [{"question": "Tom has 3 apples and buys 4. How many?", "answer": "3+4=7\n#### 7"},
            {"question": "A costs 1,000 and B 2,000. Total?", "answer": "so\n#### 3000 "},
            {"question": "No final line", "answer": "just text"}]
    summary = run(tmp_path, input=write_jsonl(tmp_path / "gsm8k.jsonl", rows), handler_name="gsm8k",
                  prompt_type="empty")
    back = read_back(summary.output)
    assert [str(r["labels"]) for r in back] == ["7", "3000"]
    assert back[0]["prompt_ids"].tolist() == sp.encode(rows[0]["question"])
    assert summary.skipped == {"bad_answer": 1}


def test_sft_handler_mindrlhf_layout(tmp_path, sp):
    rows = [{"prompt": f"{i:02d}+01-00=", "labels": str(i + 1)} for i in range(5)]
    summary = run(tmp_path, input=write_jsonl(tmp_path / "sft.jsonl", rows), handler_name="sft", prompt_type="empty",
                  map_keys={"prompt": "prompt", "response": "labels"}, append_eod=True)
    eos = sp.piece_to_id("<|endoftext|>")
    for row, got in zip(rows, read_back(summary.output)):
        prompt, response = sp.encode(row["prompt"]), sp.encode(row["labels"]) + [eos]
        assert got["prompt_ids"].tolist() == prompt
        assert got["pretrain_ids"].tolist() == prompt + response
        assert got["loss_mask"].tolist() == [0] * len(prompt) + [1] * len(response)
        assert int(got["prompt_length"]) == len(prompt)
    # fixed shapes, as MindRLHF wrote them
    summary = run(tmp_path, overwrite=True, input=write_jsonl(tmp_path / "sft.jsonl", rows), handler_name="sft",
                  prompt_type="empty", map_keys={"prompt": "prompt", "response": "labels"},
                  pad_to_max_length=True, max_prompt_length=16, seq_length=24)
    pad = sp.piece_to_id("<pad>")
    got = read_back(summary.output)[0]
    prompt, response = sp.encode(rows[0]["prompt"]), sp.encode(rows[0]["labels"])
    assert got["prompt_ids"].tolist() == prompt + [pad] * (16 - len(prompt))
    rest = 24 - len(prompt) - len(response)
    assert got["pretrain_ids"].tolist() == prompt + response + [pad] * rest
    assert got["loss_mask"].tolist() == [0] * len(prompt) + [1] * len(response) + [0] * rest


def test_multi_turn_sft_learns_every_assistant_turn_of_the_chat_template(tmp_path):
    """ShareGPT conversations (handler sharegpt): the tokens are transformers' apply_chat_template of the turns up
    to the last answer, and the loss mask covers exactly each answer with its <|im_end|> (and the final eos)."""
    transformers = pytest.importorskip("transformers")
    tok_dir = _hf_qwen_dir(tmp_path / "tok")
    ref = transformers.AutoTokenizer.from_pretrained(tok_dir)
    rows = [{"conversations": [{"from": "human", "value": "x^2 + 3x = 10, find x."}, {"from": "gpt", "value": "x = 2"},
                               {"from": "human", "value": "And the other root?"}, {"from": "gpt", "value": "x = -5"},
                               {"from": "human", "value": "Thanks"}],  # after the last answer: dropped
             "system": "You are a helpful assistant."},
            {"conversations": [{"from": "human", "value": "Solve the following math problem step by step."},
                               {"from": "gpt", "value": "Answer: $Answer"}]}]
    summary = run(tmp_path, input=write_jsonl(tmp_path / "chat.jsonl", rows), tokenizer_name_or_path=tok_dir,
                  tokenizer_type="HuggingFaceTokenizer", handler_name="sharegpt", prompt_type="hf", append_eod=True)
    assert (summary.read, summary.written) == (2, 2)
    role = {"human": "user", "gpt": "assistant"}
    for row, got in zip(rows, read_back(summary.output)):
        turns = [{"role": role[t["from"]], "content": t["value"]} for t in row["conversations"]]
        last = max(i for i, t in enumerate(turns) if t["role"] == "assistant")
        turns = turns[:last + 1]
        if row.get("system"):
            turns = [{"role": "system", "content": row["system"]}] + turns
        text = ref.apply_chat_template(turns, tokenize=False)  # ends "<|im_end|>\n"; the row ends at the eos
        ids, mask = got["pretrain_ids"].tolist(), got["loss_mask"].tolist()
        assert ids[-1] == ref.convert_tokens_to_ids("<|im_end|>") and mask[-1] == 1  # append_eod: eos = <|im_end|>
        assert ref.decode(ids[:-1]) == text[:-1]
        learned = ref.decode([t for t, m in zip(ids[:-1], mask[:-1]) if m])
        assert learned == "".join(t["content"] + "<|im_end|>" for t in turns if t["role"] == "assistant")
        first = ref.apply_chat_template(turns[:next(i for i, t in enumerate(turns) if t["role"] == "assistant")],
                                        add_generation_prompt=True, tokenize=True)
        first = first["input_ids"] if hasattr(first, "keys") else first
        assert got["prompt_ids"].tolist() == list(first) and ids[:len(first)] == list(first)
        assert mask[:len(first)] == [0] * len(first)


def test_multi_turn_sft_refuses_rows_it_cannot_learn_from(tmp_path, sp):
    """OpenAI-style messages (handler messages); a row without an answer, with a tool turn, or for a template that
    rewrites past answers (qwen3 drops their <think> part) is skipped by reason."""
    think = [{"role": "user", "content": "1+1="}, {"role": "assistant", "content": "<think>so</think>2"},
             {"role": "user", "content": "2+2="}, {"role": "assistant", "content": "4"}]
    rows = [{"messages": [{"role": "user", "content": "1+1="}, {"role": "assistant", "content": "2"}]},
            {"messages": [{"role": "user", "content": "1+1="}]},
            {"messages": [{"role": "user", "content": "1+1="}, {"role": "tool", "content": "2"}]}]
    summary = run(tmp_path, input=write_jsonl(tmp_path / "m.jsonl", rows), handler_name="messages",
                  prompt_type="empty")
    assert summary.written == 1 and summary.skipped == {"empty_response": 1, "bad_messages": 1}
    got = read_back(summary.output)[0]
    assert got["pretrain_ids"].tolist() == sp.encode("1+1=") + sp.encode("2")
    assert got["loss_mask"].tolist() == [0] * len(sp.encode("1+1=")) + [1] * len(sp.encode("2"))
    with pytest.raises(PreprocessError, match=r"no rows written .*'template_rewrites_history': 1"):
        run(tmp_path, overwrite=True, input=write_jsonl(tmp_path / "t.jsonl", [{"messages": think}]),
            handler_name="messages", prompt_type="qwen3")


def test_pairwise_handler(tmp_path, sp):
    rows = [{"prompt": "Is 2+2=4?", "pos_resp": "Yes.", "neg_resp": "No."},
            {"prompt": "Is 1+1=3?", "chosen": "No.", "rejected": "Yes."}]
    summary = run(tmp_path, input=write_jsonl(tmp_path / "pairs.jsonl", rows), handler_name="pairwise",
                  prompt_type="chatml")
    back = read_back(summary.output)
    prompt = sp.encode("<|im_start|>user\nIs 2+2=4?<|im_end|>\n<|im_start|>assistant\n")
    assert back[0]["prompt_ids"].tolist() == prompt
    assert back[0]["chosen_ids"].tolist() == prompt + sp.encode("Yes.<|im_end|>")
    assert back[0]["rejected_ids"].tolist() == prompt + sp.encode("No.<|im_end|>")
    assert back[1]["chosen_ids"].tolist()[int(back[1]["prompt_length"]):] == sp.encode("No.<|im_end|>")


def test_query_system_and_history_keys(tmp_path, sp):
    rows = [{"instruction": "Add.", "input": "1+2", "sys": "Be terse.", "turns": [["2+2?", "4"]], "out": "3"}]
    summary = run(tmp_path, input=write_jsonl(tmp_path / "h.jsonl", rows), handler_name="r1", prompt_type="chatml",
                  map_keys={"prompt": "instruction", "query": "input", "system": "sys", "history": "turns",
                            "response": "out"})
    text = ("<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
            "4<|im_end|>\n<|im_start|>user\nAdd.\n1+2<|im_end|>\n<|im_start|>assistant\n")
    got = read_back(summary.output)[0]
    assert got["prompt_ids"].tolist() == sp.encode(text) and str(got["labels"]) == "3"


def test_input_directory_and_json_lines_in_json(tmp_path, sp):
    d = tmp_path / "in"
    d.mkdir()
    write_jsonl(d / "b.json", [{"prompt": "B1", "labels": "1"}])          # JSON lines despite .json
    write_jsonl(d / "a.jsonl", [{"prompt": "A1", "labels": "1"}, {"prompt": "A2", "labels": "2"}])
    (d / "notes.txt").write_text("ignored")
    summary = run(tmp_path, input=str(d), handler_name="prompt", prompt_type="empty")
    assert [r["prompt_ids"].tolist() for r in read_back(summary.output)] == [sp.encode(t) for t in ("A1", "A2", "B1")]


# ------------------------------------------------------------------------------ bad rows, errors
BAD_LINES = [
    {"problem": "01+02-03=", "answer": "0"},       # line 1 ok
    "{this is not json",                           # line 2 malformed
    {"answer": "5"},                               # line 3 missing key
    {"problem": "   ", "answer": "1"},             # line 4 empty prompt
    "",                                            # line 5 blank: ignored
    {"problem": ["not", "messages"], "answer": "1"},  # line 6 non-string
    "[1, 2]",                                      # line 7 not an object
    {"problem": "02+02-00=", "answer": {"x": 1}},  # line 8 label of the wrong type
    {"problem": "09+09-09=", "answer": 9},         # line 9 ok: numbers are fine as labels
]


def test_bad_rows_are_counted_with_file_and_line(tmp_path, caplog):
    path = write_jsonl(tmp_path / "mixed.jsonl", BAD_LINES)
    with caplog.at_level(logging.WARNING, logger="mindrl.data.preprocess"):
        summary = run(tmp_path, input=path, handler_name="r1", prompt_type="empty")
    assert summary.written == 2 and summary.read == 8
    assert summary.skipped == {"malformed_json": 1, "missing_key": 1, "empty_prompt": 1, "non_string": 2,
                               "not_an_object": 1}
    for line in (2, 3, 4, 6, 7, 8):
        assert f"{path}:{line}:" in caplog.text
    assert [str(r["labels"]) for r in read_back(summary.output)] == ["0", "9"]


def test_strict_names_file_and_line_and_writes_nothing(tmp_path):
    path = write_jsonl(tmp_path / "mixed.jsonl", BAD_LINES)
    with pytest.raises(PreprocessError, match=rf"{path}:2: malformed_json"):
        run(tmp_path, strict=True, input=path, handler_name="r1", prompt_type="empty")
    assert not os.path.exists(tmp_path / "out" / "data.mindrecord")
    assert leftovers(tmp_path / "out") == []


@pytest.mark.parametrize("workers", [1, 2])
def test_non_utf8_line_is_one_bad_row(tmp_path, caplog, sp, workers):
    """A line that is not UTF-8 (here Latin-1) is skipped and counted with its line number; the other lines,
    including a first line behind a byte-order mark, are kept; --strict stops at it."""
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"prompt": "01+02=", "labels": "3"}).encode() + b"\n"
                     + b'{"prompt": "caf\xe9 1+1=", "labels": "2"}\n'
                     + json.dumps({"prompt": "2+2=", "labels": "4"}).encode() + b"\r\n")
    with caplog.at_level(logging.WARNING, logger="mindrl.data.preprocess"):
        summary = run(tmp_path, input=str(path), handler_name="prompt", prompt_type="empty", workers=workers)
    assert (summary.read, summary.written, dict(summary.skipped)) == (3, 2, {"not_utf8": 1})
    assert f"{path}:2: not_utf8 (byte 16 of the line is b'\\xe9', not valid UTF-8)" in caplog.text
    back = read_back(summary.output)
    assert [r["prompt_ids"].tolist() for r in back] == [sp.encode("01+02="), sp.encode("2+2=")]
    with pytest.raises(PreprocessError, match=rf"{path}:2: not_utf8"):
        run(tmp_path, strict=True, overwrite=True, input=str(path), handler_name="prompt", prompt_type="empty")


@pytest.mark.parametrize("workers", [1, 2])
def test_pathological_rows_are_skipped_and_counted(tmp_path, caplog, sp, workers):
    """A row nested 100,000 deep (json.loads: RecursionError) and a row with a 5 MB field (more than a MindRecord
    page holds) are bad rows like any other: skipped, counted, named by line; the good rows are written; --strict
    stops at the first."""
    path = tmp_path / "pathological.jsonl"
    good = [json.dumps({"prompt": f"0{i}+01=", "labels": str(i + 1)}) for i in range(3)]
    deep = '{"prompt": "1+1=", "labels": ' + "[" * 100_000 + "]" * 100_000 + "}"
    huge = json.dumps({"prompt": "2+2=", "labels": "4" * 5_000_000})
    path.write_text("\n".join([good[0], deep, good[1], huge, good[2]]) + "\n")
    with caplog.at_level(logging.WARNING, logger="mindrl.data.preprocess"):
        summary = run(tmp_path, input=str(path), handler_name="prompt", prompt_type="empty", workers=workers)
    assert (summary.read, summary.written, dict(summary.skipped)) == (5, 3, {"too_deeply_nested": 1, "too_large": 1})
    assert f"{path}:2: too_deeply_nested (nested deeper than Python's recursion limit" in caplog.text
    assert f"{path}:4: too_large (its fields take 5000024 bytes, more than the 2097152 a row may)" in caplog.text
    assert [r["prompt_ids"].tolist() for r in read_back(summary.output)] == [sp.encode(f"0{i}+01=") for i in range(3)]
    with pytest.raises(PreprocessError, match=rf"{path}:2: too_deeply_nested"):
        run(tmp_path, strict=True, overwrite=True, input=str(path), handler_name="prompt", prompt_type="empty")


def test_non_utf8_json_array_names_file_and_line(tmp_path, capsys):
    """A JSON array cannot lose one row: the file and line are named, exit 1, nothing is left behind."""
    path = tmp_path / "rows.json"
    path.write_bytes(b'[\n  {"prompt": "1+1=", "labels": "2"},\n  {"prompt": "caf\xe9", "labels": "2"}\n]\n')
    assert cli_main(["--config", _config_file(tmp_path, input=path)]) == 1
    assert f"{path}:3: not valid UTF-8" in capsys.readouterr().err
    assert os.listdir(tmp_path / "o") == []


def _corrupt_parquet(tmp_path, kind):
    """A parquet file that fails to open ("truncated": no footer) or halfway through ("bad_page": the last
    row group's pages overwritten, its footer intact)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    path = tmp_path / f"{kind}.parquet"
    rows = [{"prompt": f"{i:04d}+1=" + "x" * 40, "labels": str(i + 1)} for i in range(3000)]
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=1200)
    data = bytearray(path.read_bytes())
    if kind == "truncated":
        del data[len(data) // 2:]
    else:
        meta = pq.ParquetFile(path).metadata
        last = meta.row_group(meta.num_row_groups - 1)
        for c in range(last.num_columns):
            start = last.column(c).data_page_offset
            data[start + 16:start + 200] = bytes(range(184))
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("kind", ["truncated", "bad_page"])
def test_corrupt_parquet_names_the_file_and_leaves_nothing(tmp_path, capsys, kind):
    path = _corrupt_parquet(tmp_path, kind)
    assert cli_main(["--config", _config_file(tmp_path, input=path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]     # the error is one line, the last
    assert err.startswith(f"mindrl preprocess: error: {path}: cannot read parquet (" if kind == "truncated" else
                          f"mindrl preprocess: error: {path}: cannot read parquet after record 2048 (")
    assert err.endswith(")")
    # with bad_page, two batches of 1024 rows were read and written to the staging directory first
    assert os.listdir(tmp_path / "o") == []   # no staging directory, no partial output


def test_length_limits_filter_and_count(tmp_path, sp):
    rows = [{"prompt": "1" * n, "labels": "x"} for n in (3, 10, 4, 20)]
    summary = run(tmp_path, strict=True, input=write_jsonl(tmp_path / "len.jsonl", rows), handler_name="prompt",
                  prompt_type="empty", max_prompt_length=5)
    assert summary.written == 2 and summary.skipped == {"prompt_too_long": 2}
    assert [r["prompt_ids"].tolist() for r in read_back(summary.output)] == [sp.encode("111"), sp.encode("1111")]


def test_existing_output_is_refused_then_overwritten(tmp_path, capsys):
    data = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "1+1=", "labels": "2"}])
    config = tmp_path / "c.yaml"
    config.write_text(f"input: {data}\ntokenizer_name_or_path: {TINY}\noutput_prefix: {tmp_path}/o/data\n"
                      f"handler_name: prompt\n")
    assert cli_main(["--config", str(config)]) == 0
    first = os.path.getmtime(tmp_path / "o" / "data.mindrecord")
    assert cli_main(["--config", str(config)]) == 2      # a usage error: nothing was read
    assert "already exists" in capsys.readouterr().err
    assert os.path.getmtime(tmp_path / "o" / "data.mindrecord") == first
    write_jsonl(tmp_path / "d.jsonl", [{"prompt": "1+1=", "labels": "2"}, {"prompt": "2+2=", "labels": "4"}])
    assert cli_main(["--config", str(config), "--overwrite"]) == 0
    assert len(read_back(tmp_path / "o" / "data.mindrecord")) == 2


def test_crash_mid_write_leaves_no_output(tmp_path, monkeypatch):
    rows = problems(2500)
    path = write_jsonl(tmp_path / "big.jsonl", rows)
    original = handlers.R1Handler.__call__
    calls = {"n": 0}

    def crash_late(self, row):
        calls["n"] += 1
        if calls["n"] == 2200:          # after two FileWriter flushes of 1000 rows
            raise RuntimeError("simulated crash")
        return original(self, row)

    monkeypatch.setattr(handlers.R1Handler, "__call__", crash_late)
    with pytest.raises(RuntimeError, match="simulated crash"):
        run(tmp_path, input=path, handler_name="r1")
    out = tmp_path / "out"
    assert not os.path.exists(out / "data.mindrecord") and not os.path.exists(out / "data.mindrecord.db")
    assert leftovers(out) == []
    # with --overwrite, a crash keeps the previous good output untouched
    monkeypatch.setattr(handlers.R1Handler, "__call__", original)
    good = run(tmp_path, input=write_jsonl(tmp_path / "small.jsonl", rows[:3]), handler_name="r1")
    monkeypatch.setattr(handlers.R1Handler, "__call__", crash_late)
    calls["n"] = 0
    with pytest.raises(RuntimeError):
        run(tmp_path, overwrite=True, input=path, handler_name="r1")
    assert len(read_back(good.output)) == 3
    assert leftovers(out) == []


def test_killed_process_leaves_no_output(tmp_path):
    path = write_jsonl(tmp_path / "big.jsonl", problems(60000))
    config = tmp_path / "c.yaml"
    out = tmp_path / "o"
    config.write_text(f"input: {path}\ntokenizer_name_or_path: {TINY}\noutput_prefix: {out}/data\n"
                      f"handler_name: r1\nprompt_type: qwen\n")
    proc = subprocess.Popen([sys.executable, "-m", "mindrl.cli", "preprocess", "--config", str(config)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        # wait until the writer has produced part of the file in its private directory
        while time.time() < deadline:
            partial = [os.path.join(out, d, "data.mindrecord") for d in leftovers(out)]
            if any(os.path.exists(p) and os.path.getsize(p) > 0 for p in partial):
                break
            assert proc.poll() is None, "preprocess finished before it could be killed; make the input bigger"
            time.sleep(0.05)
        else:
            pytest.fail("the writer never started")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not os.path.exists(out / "data.mindrecord")
    assert not os.path.exists(out / "data.mindrecord.db")


def test_workers_parallelise_and_keep_order(tmp_path):
    rows = problems(4000)
    path = write_jsonl(tmp_path / "p.jsonl", rows)
    one = run(tmp_path, input=path, handler_name="r1", prompt_type="qwen", output_prefix=str(tmp_path / "w1"))
    two = run(tmp_path, input=path, handler_name="r1", prompt_type="qwen", output_prefix=str(tmp_path / "w2"),
              workers=2)
    assert one.worker_pids == {os.getpid()}
    assert len(two.worker_pids) == 2 and os.getpid() not in two.worker_pids
    a, b = read_back(one.output), read_back(two.output)
    assert len(a) == len(b) == 4000
    for x, y in zip(a, b):
        assert x["prompt_ids"].tolist() == y["prompt_ids"].tolist() and str(x["labels"]) == str(y["labels"])
    assert [str(r["labels"]) for r in b] == [r["answer"] for r in rows]


def test_no_rows_is_an_error(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", ["{oops"])
    with pytest.raises(PreprocessError, match="no rows written"):
        run(tmp_path, input=path)
    assert leftovers(tmp_path / "out") == [] and not os.path.exists(tmp_path / "out" / "data.mindrecord")


# ----------------------------------------------------------------------------------------- config
def test_config_errors(tmp_path, caplog):
    base = {"input": "x.jsonl", "tokenizer_name_or_path": TINY, "output_prefix": "o"}
    with pytest.raises(PreprocessConfigError, match="unknown config key 'promt_type'"):
        load_dataset_config(None, extra={**base, "promt_type": "qwen"})
    with pytest.raises(PreprocessError, match="workers must be an integer"):
        load_dataset_config(None, extra={**base, "workers": "two"})
    with pytest.raises(PreprocessError, match="unknown handler_name 'nope'"):
        load_dataset_config(None, extra={**base, "handler_name": "nope"})
    with pytest.raises(PreprocessError, match="unknown prompt_type 'nope'"):
        load_dataset_config(None, extra={**base, "prompt_type": "nope"})
    with pytest.raises(PreprocessError, match="pad_to_max_length needs max_prompt_length and seq_length"):
        load_dataset_config(None, extra={**base, "handler_name": "sft", "pad_to_max_length": True})
    with pytest.raises(PreprocessError, match="input is required"):
        load_dataset_config(None, extra={"tokenizer_name_or_path": TINY, "output_prefix": "o"})
    with caplog.at_level(logging.INFO, logger="mindrl.data.preprocess"):
        cfg = load_dataset_config(None, extra={**base, "cache_dir": "/tmp/cache", "pack": False})
    assert "accepted, no effect in mindrl: cache_dir" in caplog.text and cfg["workers"] == 1
    with pytest.raises(PreprocessError, match="pack: true is not used by mindrl because mindrl does not pack prompt "
                                              "datasets"):
        load_dataset_config(None, extra={**base, "pack": True})
    config = tmp_path / "c.yaml"
    config.write_text("input: a.jsonl\noutput_prefix: o\ntokenizer_name_or_path: t\nbogus: 1\n")
    with pytest.raises(PreprocessError, match=rf"'bogus' in {config}"):
        load_dataset_config(str(config))
    with pytest.raises(PreprocessConfigError, match="input file or directory not found"):
        run(tmp_path, input=str(tmp_path / "missing.jsonl"))


def test_overrides_before_between_and_after_flags(tmp_path, sp):
    data = write_jsonl(tmp_path / "questions.jsonl", [{"question": "1+1=", "labels": "2"}])
    config = _config_file(tmp_path, input="missing.jsonl")
    argv = [f"input={data}", "--config", config, "map_keys.prompt=question", "--strict", "--overwrite",
            f"output_prefix={tmp_path}/o/other"]
    assert cli_main(argv) == 0
    assert [r["prompt_ids"].tolist() for r in read_back(tmp_path / "o" / "other.mindrecord")] == [sp.encode("1+1=")]
    assert not os.path.exists(tmp_path / "o" / "data.mindrecord")


USAGE_ERRORS = {  # argv after "--config c.yaml" (or the config's keys) -> the message
    "unknown key": (["promt_type=qwen"], "unknown config key 'promt_type'"),
    "bad value": (["workers=two"], "workers must be an integer >= 1, got 'two'"),
    "override without =": (["workers"], "override 'workers' must look like key=value"),
    "override not yaml": (["map_keys={prompt: q"], "override 'map_keys={prompt: q'"),
    "missing input": (["input=nowhere.jsonl"], "nowhere.jsonl: input file or directory not found"),
    "unsupported input": (["input=c.yaml"], "unsupported input type"),
    "missing tokenizer": (["tokenizer_name_or_path=no_tokenizer_here"], "no_tokenizer_here"),
    "missing config": (None, "config file not found"),
}


@pytest.mark.parametrize("case", USAGE_ERRORS)
def test_usage_and_config_errors_exit_2(tmp_path, capsys, monkeypatch, case):
    monkeypatch.chdir(tmp_path)
    extra, message = USAGE_ERRORS[case]
    config = _config_file(tmp_path) if extra is not None else str(tmp_path / "absent.yaml")
    assert cli_main(["--config", config, *(extra or [])]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("mindrl preprocess: error: ") and message in err, err
    assert not os.path.exists(tmp_path / "o")


def test_bad_arguments_exit_2(tmp_path, capsys):
    for argv in ([], ["--config"], ["--config", "c.yaml", "--bogus"]):
        with pytest.raises(SystemExit) as exc:
            cli_main(argv)
        assert exc.value.code == 2, argv
    assert "--config" in capsys.readouterr().err


def test_runtime_failures_exit_1(tmp_path, capsys):
    config = _config_file(tmp_path, input=write_jsonl(tmp_path / "bad.jsonl", ["{oops", "[1]"]))
    assert cli_main(["--config", config]) == 1
    assert "no rows written" in capsys.readouterr().err.strip().splitlines()[-1]
    assert cli_main(["--config", config, "--strict"]) == 1
    assert f"{tmp_path / 'bad.jsonl'}:1: malformed_json" in capsys.readouterr().err


def test_exit_status_through_the_mindrl_command(tmp_path):
    config = _config_file(tmp_path, input=str(tmp_path / "nowhere.jsonl"))
    res = subprocess.run([sys.executable, "-m", "mindrl.cli", "preprocess", "--config", config], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    missing = tmp_path / "nowhere.jsonl"
    assert res.stderr.strip() == f"mindrl preprocess: error: {missing}: input file or directory not found"


def test_overrides(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("input: a.jsonl\noutput_prefix: o\ntokenizer_name_or_path: t\n"
                      "map_keys: {prompt: problem, response: answer}\n")
    cfg = load_dataset_config(str(config), ["workers=2", "map_keys.prompt=question", "dataset_additional_keys=[labels]",
                                    "prompt_type=qwen3", "enable_thinking=false"])
    assert cfg["workers"] == 2 and cfg["prompt_type"] == "qwen3" and cfg["enable_thinking"] is False
    assert cfg["map_keys"] == {"prompt": "question", "response": "answer"}
    assert cfg["dataset_additional_keys"] == ["labels"]


@pytest.mark.parametrize("name", ["deepscaler", "math_17k", "gsm8k", "pairwise", "sft", "tiny_math"])
def test_shipped_configs_are_valid(name):
    cfg = load_dataset_config(os.path.join(ROOT, "configs", "datasets", f"{name}.yaml"))
    assert cfg["output_prefix"] and cfg["input"]


# ------------------------------------------------------------------------------- commands as run
def test_preprocess_data_sh_tiny_math(tmp_path, sp):
    data = tmp_path / "train.jsonl"
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_tiny_tokenizer.py"), "--out",
                    str(tmp_path / "tok"), "--write-data", str(data), "--rows", "50"], check=True, capture_output=True)
    proc = subprocess.run(["bash", os.path.join(ROOT, "scripts", "preprocess_data.sh"), "tiny_math",
                           f"input={data}", "--overwrite", f"output_prefix={tmp_path}/tiny"],
                          cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stderr
    back = read_back(tmp_path / "tiny.mindrecord")
    rows = [json.loads(line) for line in open(data)]
    assert len(back) == 50
    assert back[0]["prompt_ids"].tolist() == sp.encode(rows[0]["prompt"])
    assert str(back[0]["labels"]) == rows[0]["labels"]


def test_mindrlhf_tutorial_command(tmp_path):
    tok_dir = _hf_qwen_dir(tmp_path / "qwen")
    rows = [{"prompt": "x^2 + 3x = 10, find x.", "pos_resp": "x = 2 or x = -5.", "neg_resp": "No idea."},
            {"prompt": "You are a helpful assistant.", "pos_resp": "Thanks.", "neg_resp": "?"}]
    data = write_jsonl(tmp_path / "input.jsonl", rows)
    out = tmp_path / "output.mindrecord"
    cmd = [sys.executable, "examples/qwen_ppo_tutorial/rlhf_data.py", "--vocab_path", f"{tok_dir}/vocab.json",
           "--merges_file_path", f"{tok_dir}/merges.txt", "--file_path", data, "--output_path", str(out),
           "--max_prompt_length", "4096", "--seq_length", "8193"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "Total number of samples: 2" in proc.stdout
    transformers = pytest.importorskip("transformers")
    ref = transformers.AutoTokenizer.from_pretrained(tok_dir)
    back = read_back(out)
    assert set(back[0]) == {"prompt_ids", "pretrain_ids", "loss_mask", "prompt_length"}
    for row, got in zip(rows, back):
        prompt = ref.encode(row["prompt"], add_special_tokens=False)
        response = ref.encode(row["pos_resp"], add_special_tokens=False)
        n = len(prompt) + len(response)
        assert got["prompt_ids"].shape == (4096,) and got["pretrain_ids"].shape == (8193,)
        assert got["prompt_ids"][:len(prompt)].tolist() == prompt
        assert set(got["prompt_ids"][len(prompt):].tolist()) == {ref.pad_token_id}
        assert got["pretrain_ids"][:n].tolist() == prompt + response
        assert got["loss_mask"].sum() == len(response) and got["loss_mask"][len(prompt):n].all()
    # re-running the same command replaces the output, as MindRLHF's script did
    assert subprocess.run(cmd, cwd=ROOT, capture_output=True).returncode == 0
