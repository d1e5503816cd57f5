"""`prompt_type: hf`: mindrl renders the tokenizer directory's own chat template, compared string for string and id for
id with `transformers.apply_chat_template` on real models' templates (tests/data/chat_templates/, sources in its
README). Each tokenizer directory is a small BPE with the family's special tokens, read by both libraries."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from mindrl.data.chat_template import find_chat_template, turn_end_ids
from mindrl.data.preprocess import cli_main
from mindrl.data.templates import TemplateError, TemplateRenderError, get_template, render
from mindrl.data.tokenizer import load_tokenizer
from test_preprocess import read_back, write_jsonl

transformers = pytest.importorskip("transformers")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "chat_templates")
CHATML_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QWEN_EXTRA = ["<think>", "</think>", "<tool_call>", "</tool_call>"]    # Qwen3 marks these not special
LLAMA_TOKENS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                "<|eom_id|>", "<|python_tag|>"]
GEMMA_TOKENS = ["<bos>", "<eos>", "<pad>", "<start_of_turn>", "<end_of_turn>"]
FAMILIES = {  # template file -> (special tokens, tokenizer_config special token keys, where the template is stored)
    "chatml": (CHATML_TOKENS, {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, "tokenizer_config"),
    "smollm2": (CHATML_TOKENS, {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|im_end|>",
                                "unk_token": "<|endoftext|>"}, "tokenizer_config"),
    "qwen2_5": (CHATML_TOKENS + QWEN_EXTRA, {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
                "tokenizer_config"),
    "qwen3": (CHATML_TOKENS + QWEN_EXTRA, {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, "jinja"),
    "llama3": (LLAMA_TOKENS, {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}, "tokenizer_config"),
    "llama3_1": (LLAMA_TOKENS, {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}, "tokenizer_config"),
    "llama3_2": (LLAMA_TOKENS, {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}, "jinja"),
    "gemma": (GEMMA_TOKENS, {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"}, "tokenizer_config"),
}
CORPUS = ["You are a helpful assistant. What is 1+1? The answer is 2.", "Hello there, how are you today?",
          "<b>tags</b> & \"quotes\" stay as they are: {\"a\": 1}", "Think step by step, then answer.",
          "日本語も"] * 10


def template_text(name):
    with open(os.path.join(DATA, f"{name}.jinja"), encoding="utf-8") as f:
        return f.read()


@pytest.fixture(scope="module")
def bpe():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=300, show_progress=False,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok.to_str()


def make_dir(directory, bpe, family, template=None, where=None):
    """A tokenizer directory: tokenizer.json with the family's added tokens, tokenizer_config.json, and the template
    (``template`` text, default the family's file) in tokenizer_config.json or chat_template.jinja."""
    from tokenizers import AddedToken, Tokenizer
    tokens, specials, default_where = FAMILIES[family]
    tok = Tokenizer.from_str(bpe)
    tok.add_tokens([AddedToken(t, special=t not in QWEN_EXTRA, normalized=False) for t in tokens])
    os.makedirs(directory, exist_ok=True)
    tok.save(os.path.join(directory, "tokenizer.json"))
    added = {str(tok.token_to_id(t)): {"content": t, "special": t not in QWEN_EXTRA, "lstrip": False,
                                       "rstrip": False, "normalized": False, "single_word": False} for t in tokens}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "added_tokens_decoder": added, **specials}
    template = template_text(family) if template is None else template
    if (where or default_where) == "jinja":
        with open(os.path.join(directory, "chat_template.jinja"), "w", encoding="utf-8") as f:
            f.write(template)
    elif template:
        config["chat_template"] = template
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False)
    return str(directory)


@pytest.fixture(scope="module")
def dirs(bpe, tmp_path_factory):
    """family -> (our tokenizer, transformers' tokenizer) of the same directory."""
    out = {}
    for family in FAMILIES:
        d = make_dir(tmp_path_factory.mktemp(family), bpe, family)
        out[family] = (load_tokenizer(d), transformers.AutoTokenizer.from_pretrained(d))
    return out


def ours(tok):
    return get_template("hf", tokenizer=tok)


def reference(ref, messages, **kwargs):
    return ref.apply_chat_template(messages, tokenize=False, **kwargs)


SYSTEM = {"role": "system", "content": "You are terse. <b>&</b>"}
USER = {"role": "user", "content": " What is 1+1?\n"}               # the spaces show who trims message text
ANSWER = {"role": "assistant", "content": "It is 2."}
USER2 = {"role": "user", "content": "And {\"a\": 1}?"}
CONVERSATIONS = {
    "single": [USER],
    "system": [SYSTEM, USER],
    "multi_turn": [SYSTEM, USER, ANSWER, USER2],
    "multi_turn_no_system": [USER, ANSWER, USER2],
    "ends_with_answer": [USER, ANSWER],
}
CHAT_FAMILIES = [f for f in FAMILIES if f != "gemma"]


@pytest.mark.parametrize("generation", [True, False], ids=["gen", "no_gen"])
@pytest.mark.parametrize("conversation", sorted(CONVERSATIONS))
@pytest.mark.parametrize("family", CHAT_FAMILIES)
def test_same_text_as_transformers(dirs, family, conversation, generation):
    tok, ref = dirs[family]
    messages = CONVERSATIONS[conversation]
    got = ours(tok).render_messages(messages, add_generation_prompt=generation)
    assert got == reference(ref, messages, add_generation_prompt=generation)


def test_the_templates_do_what_the_tests_claim(dirs):
    """Guards the comparison above against passing on empty or trivial output."""
    single = {f: ours(dirs[f][0]).render_messages([USER]) for f in CHAT_FAMILIES}
    assert single["chatml"] == "<|im_start|>user\n What is 1+1?\n<|im_end|>\n<|im_start|>assistant\n"
    assert single["smollm2"].startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained "
                                        "by Hugging Face<|im_end|>\n")
    assert single["qwen2_5"].startswith("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a "
                                        "helpful assistant.<|im_end|>\n")
    assert single["llama3_1"] == ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge "
                                  "Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user"
                                  "<|end_header_id|>\n\nWhat is 1+1?<|eot_id|><|start_header_id|>assistant"
                                  "<|end_header_id|>\n\n")
    assert "<|im_start|>system" not in single["qwen3"] and single["qwen3"].endswith("<|im_start|>assistant\n")
    # the data's system prompt replaces the template's default
    with_system = ours(dirs["qwen2_5"][0]).render_messages([SYSTEM, USER])
    assert "You are terse. <b>&</b>" in with_system and "Alibaba" not in with_system


@pytest.mark.parametrize("thinking", [True, False, None])
def test_qwen3_enable_thinking(dirs, thinking):
    tok, ref = dirs["qwen3"]
    extra = {} if thinking is None else {"enable_thinking": thinking}
    for messages in (CONVERSATIONS["single"], CONVERSATIONS["multi_turn"]):
        got = ours(tok).render_messages(messages, **extra)
        assert got == reference(ref, messages, add_generation_prompt=True, **extra)
        assert got.endswith("<think>\n\n</think>\n\n") == (thinking is False)


def test_qwen3_history_with_think_blocks(dirs):
    tok, ref = dirs["qwen3"]
    history = [["2+2?", "<think>\nadd them\n</think>\n\n4"], ["and 3+3?", "<think>\nagain\n</think>\n\n6"]]
    for thinking in (None, False):
        got = render("hf", "and 5+5?", history=history, tokenizer=tok, enable_thinking=thinking)
        messages = [m for u, a in history for m in ({"role": "user", "content": u},
                                                      {"role": "assistant", "content": a})]
        messages.append({"role": "user", "content": "and 5+5?"})
        extra = {} if thinking is None else {"enable_thinking": thinking}
        assert got == reference(ref, messages, add_generation_prompt=True, **extra)
        assert "add them" not in got and "<|im_start|>assistant\n4<|im_end|>" in got
    # the reasoning of the turn being continued is kept (it is after the last user query)
    ongoing = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "<think>\nadd\n</think>\n\n4"}]
    assert ours(tok).render_messages(ongoing, add_generation_prompt=False) == reference(ref, ongoing)


TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city <now>",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.mark.parametrize("family", ["llama3_1", "llama3_2", "qwen2_5", "qwen3"])
def test_tools_preamble(dirs, family):
    """Tools render through the template's tojson (indent=4 in Llama 3.1, no HTML escaping of <now>)."""
    tok, ref = dirs[family]
    messages = [SYSTEM, USER]
    got = ours(tok).render_messages(messages, tools=[TOOL])
    assert got == reference(ref, messages, add_generation_prompt=True, tools=[TOOL])
    assert '"description": "Weather in a city <now>"' in got


def test_llama3_1_builtin_tools_and_date_string(dirs):
    tok, ref = dirs["llama3_1"]
    extra = {"builtin_tools": ["brave_search", "code_interpreter", "wolfram_alpha"], "date_string": "01 Jan 2025"}
    got = ours(tok).render_messages([USER], **extra)
    assert got == reference(ref, [USER], add_generation_prompt=True, **extra)
    assert "Environment: ipython\nTools: brave_search, wolfram_alpha\n\n" in got and "Today Date: 01 Jan 2025" in got


def test_llama3_2_dates_with_strftime_now(dirs):
    from datetime import datetime
    tok, ref = dirs["llama3_2"]
    got = ours(tok).render_messages([USER])
    if datetime.now().strftime("%d %b %Y") not in got:     # the day turned between the two renderings
        got = ours(tok).render_messages([USER])
    assert got == reference(ref, [USER], add_generation_prompt=True)
    assert f"Today Date: {datetime.now().strftime('%d %b %Y')}\n" in got


def test_keys_set_to_none_are_dropped(dirs):
    """A parquet row gives each message every key of its struct, None where unset; transformers drops those keys,
    and Llama 3.1's template would otherwise take ``'tool_calls' in message`` for a tool call."""
    tok, ref = dirs["llama3_1"]
    messages = [dict(USER, tool_calls=None), dict(ANSWER, tool_calls=None), dict(USER2, tool_calls=None)]
    got = ours(tok).render_messages(messages)
    assert got == reference(ref, messages, add_generation_prompt=True) and "It is 2.<|eot_id|>" in got


# ------------------------------------------------------------------------------------------ response end
@pytest.mark.parametrize("family, end", [("chatml", "<|im_end|>"), ("smollm2", "<|im_end|>"), ("qwen2_5", "<|im_end|>"),
                                         ("qwen3", "<|im_end|>"), ("llama3", "<|eot_id|>"), ("llama3_1", "<|eot_id|>"),
                                         ("llama3_2", "<|eot_id|>"), ("gemma", "<end_of_turn>")])
def test_response_end_and_stop_words_come_from_the_template(dirs, family, end):
    tok, _ = dirs[family]
    template = ours(tok)
    assert template.response_end == end and template.stop_words == (end,)
    assert turn_end_ids(tok) == [tok.token_to_id(end)]
    # a prompt followed by a trained response is what the template renders for the whole exchange
    extra = {"enable_thinking": False} if family == "qwen3" else {}
    for response in ("It is 2.", " It is 2. "):
        whole = template.render_messages([USER, {"role": "assistant", "content": response}],
                                         add_generation_prompt=False)
        assert whole.startswith(template.render_messages([USER], **extra) + template.response_text(response))


def test_no_template_means_no_turn_end_ids(bpe, tmp_path):
    tok = load_tokenizer(make_dir(tmp_path / "bare", bpe, "chatml", template=""))
    assert turn_end_ids(tok) == []
    with pytest.raises(TemplateError, match="has no chat template"):
        get_template("hf", tokenizer=tok)


def test_a_turn_end_without_a_special_token_is_empty(bpe, tmp_path):
    plain = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n\n{% endfor %}" \
            "{% if add_generation_prompt %}assistant:{% endif %}"
    tok = load_tokenizer(make_dir(tmp_path / "plain", bpe, "chatml", template=plain))
    template = ours(tok)
    assert (template.response_end, template.stop_words, turn_end_ids(tok)) == ("", (), [])
    assert template.response_text("x") == "x"


# ------------------------------------------------------------------------------------------ where it lives
def test_template_locations_and_precedence(bpe, tmp_path):
    """chat_template.jinja wins over tokenizer_config.json, which wins over a processor's chat_template.json;
    tokenizer_config.json may hold named templates, of which 'default' is used (transformers' rules)."""
    d = tmp_path / "t"
    make_dir(d, bpe, "chatml", template=template_text("chatml"))
    assert find_chat_template(str(d)) == (template_text("chatml"), str(d / "tokenizer_config.json"))
    (d / "chat_template.jinja").write_text(template_text("smollm2"))
    assert find_chat_template(str(d))[0] == template_text("smollm2")
    os.remove(d / "chat_template.jinja")
    config = json.loads((d / "tokenizer_config.json").read_text())
    config["chat_template"] = [{"name": "tool_use", "template": "x"},
                               {"name": "default", "template": template_text("qwen2_5")}]
    (d / "tokenizer_config.json").write_text(json.dumps(config))
    assert find_chat_template(str(d))[0] == template_text("qwen2_5")
    ref = transformers.AutoTokenizer.from_pretrained(str(d))
    assert ours(load_tokenizer(d)).render_messages([USER]) == reference(ref, [USER], add_generation_prompt=True)
    del config["chat_template"]
    (d / "tokenizer_config.json").write_text(json.dumps(config))
    (d / "chat_template.json").write_text(json.dumps({"chat_template": template_text("llama3")}))
    assert find_chat_template(str(d)) == (template_text("llama3"), str(d / "chat_template.json"))
    config["chat_template"] = [{"name": "tool_use", "template": "x"}]
    (d / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(TemplateError, match="no 'default'"):
        find_chat_template(str(d))


def test_special_tokens_map_json_is_read_as_transformers_reads_it(bpe, tmp_path):
    d = tmp_path / "legacy"
    make_dir(d, bpe, "llama3")
    config = json.loads((d / "tokenizer_config.json").read_text())
    del config["added_tokens_decoder"], config["bos_token"]
    (d / "tokenizer_config.json").write_text(json.dumps(config))
    (d / "special_tokens_map.json").write_text(json.dumps({"bos_token": {"content": "<|begin_of_text|>"}}))
    ref = transformers.AutoTokenizer.from_pretrained(str(d))
    got = ours(load_tokenizer(d)).render_messages([USER])
    assert got == reference(ref, [USER], add_generation_prompt=True) and got.startswith("<|begin_of_text|>")


# ------------------------------------------------------------------------------------------ the sandbox
def test_the_sandbox_holds(bpe, tmp_path):
    escape = "{{ messages.__class__.__mro__ }}"
    tok = load_tokenizer(make_dir(tmp_path / "evil", bpe, "chatml", template=escape + "<|im_end|>"))
    with pytest.raises(TemplateError, match="raised"):
        ours(tok)
    append = "{% set x = messages.append(1) %}{% for m in messages %}{{ m['content'] }}<|im_end|>{% endfor %}"
    tok = load_tokenizer(make_dir(tmp_path / "mutate", bpe, "chatml", template=append))
    with pytest.raises(TemplateError, match="raised"):
        ours(tok)


def test_loopcontrols_generation_tag_and_namespace(bpe, tmp_path):
    text = ("{% set ns = namespace(n=0) %}{% for m in messages %}{% if m['role'] == 'system' %}{% continue %}"
            "{% endif %}{% set ns.n = ns.n + 1 %}{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] }}"
            "<|im_end|>{% endgeneration %}{% else %}[{{ ns.n }}] {{ m['content'] | trim }}\n{% endif %}"
            "{% if loop.index > 3 %}{% break %}{% endif %}{% endfor %}{{ dict(a=1) | tojson }}")
    d = make_dir(tmp_path / "ctl", bpe, "chatml", template=text)
    messages = CONVERSATIONS["multi_turn"] + [ANSWER, USER]
    got = ours(load_tokenizer(d)).render_messages(messages)
    assert got == reference(transformers.AutoTokenizer.from_pretrained(d), messages, add_generation_prompt=True)
    assert got == '[1] What is 1+1?\nIt is 2.<|im_end|>[3] And {"a": 1}?\n{"a": 1}'   # the 5th message is not reached


def test_block_whitespace_is_trimmed_as_transformers_trims_it(bpe, tmp_path):
    """trim_blocks and lstrip_blocks: indented block tags without '-' leave no spaces or newlines behind."""
    text = ("{% for m in messages %}\n    {% if m['role'] == 'user' %}\nU: {{ m['content'] }}\n    {% else %}\n"
            "A: {{ m['content'] }}<|im_end|>\n    {% endif %}\n{% endfor %}<|im_end|>")
    d = make_dir(tmp_path / "ws", bpe, "chatml", template=text)
    got = ours(load_tokenizer(d)).render_messages([USER])
    assert got == reference(transformers.AutoTokenizer.from_pretrained(d), [USER], add_generation_prompt=True)
    assert got == "U:  What is 1+1?\n\n<|im_end|>"


# ------------------------------------------------------------------------------------------ mindrl preprocess
def config_file(tmp_path, **keys):
    path = tmp_path / "c.yaml"
    path.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in keys.items()))
    return str(path)


ROWS = [{"problem": "What is 1+1?", "answer": "2"},
        {"problem": " Spaces and <b>tags</b> ", "answer": "3", "system": "Answer in one word."},
        {"problem": "日本語も?", "answer": "4"}]


@pytest.mark.parametrize("family, thinking", [("qwen3", False), ("qwen3", None), ("llama3_1", None),
                                              ("smollm2", None)])
def test_preprocess_writes_transformers_ids(dirs, tmp_path, family, thinking):
    tok, ref = dirs[family]
    keys = dict(input=write_jsonl(tmp_path / "d.jsonl", ROWS), tokenizer_name_or_path=tok.directory,
                output_prefix=str(tmp_path / "out" / "data"), handler_name="R1AlpacaStyleInstructionHandler",
                prompt_type="hf", map_keys={"prompt": "problem", "response": "answer", "system": "system"},
                dataset_additional_keys=["labels"])
    if thinking is not None:
        keys["enable_thinking"] = thinking
    assert cli_main(["--config", config_file(tmp_path, **keys)]) == 0
    back = read_back(tmp_path / "out" / "data.mindrecord")
    assert len(back) == len(ROWS)
    for row, got in zip(ROWS, back):
        messages = ([{"role": "system", "content": row["system"]}] if "system" in row else []) + \
                   [{"role": "user", "content": row["problem"]}]
        extra = {} if thinking is None else {"enable_thinking": thinking}
        want = ref.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, **extra)
        want = want["input_ids"] if hasattr(want, "keys") else want
        assert got["prompt_ids"].tolist() == list(want)
        assert str(got["labels"]) == row["answer"]


def test_preprocess_sft_targets_end_with_the_turn_end(dirs, tmp_path):
    tok, _ = dirs["llama3_1"]
    rows = [{"instruction": "Say hi", "output": " hi "}]
    assert cli_main(["--config", config_file(
        tmp_path, input=write_jsonl(tmp_path / "s.jsonl", rows), tokenizer_name_or_path=tok.directory,
        output_prefix=str(tmp_path / "sft"), handler_name="sft", prompt_type="hf")]) == 0
    (got,) = read_back(tmp_path / "sft.mindrecord")
    n = int(got["prompt_length"])
    assert tok.decode(got["pretrain_ids"][n:]) == "hi<|eot_id|>"     # Llama 3 trims message text


def run_cli(tmp_path, capsys, *extra, **keys):
    base = dict(input=write_jsonl(tmp_path / "d.jsonl", ROWS), output_prefix=str(tmp_path / "o" / "data"),
                handler_name="r1", prompt_type="hf", map_keys={"prompt": "problem", "response": "answer",
                                                               "system": "system"})
    capsys.readouterr()
    code = cli_main(["--config", config_file(tmp_path, **{**base, **keys}), *extra])
    return code, capsys.readouterr().err


def test_no_chat_template_is_a_one_line_config_error(bpe, tmp_path, capsys):
    bare = make_dir(tmp_path / "bare", bpe, "chatml", template="")
    code, err = run_cli(tmp_path, capsys, tokenizer_name_or_path=bare)
    assert code == 2
    (line,) = err.strip().splitlines()
    assert line.startswith(f"mindrl preprocess: error: template hf: {bare} has no chat template")
    assert "has no chat template (looked for chat_template.jinja, tokenizer_config.json's chat_template" in line
    assert not os.path.exists(tmp_path / "o")


def test_template_raise_exception_names_the_row(dirs, tmp_path, capsys, caplog):
    """Gemma's real template refuses a system message: row 2 (the one with a system prompt) is skipped, by name."""
    tok, _ = dirs["gemma"]
    with caplog.at_level("WARNING", logger="mindrl.data.preprocess"):
        code, _ = run_cli(tmp_path, capsys, tokenizer_name_or_path=tok.directory)
    assert code == 0
    skipped = [r.getMessage() for r in caplog.records if r.getMessage().startswith("skipped")]
    assert skipped == [f"skipped {tmp_path / 'd.jsonl'}:2: template_error (chat template "
                       f"{os.path.join(tok.directory, 'tokenizer_config.json')} raised: System role not supported)"]
    assert len(read_back(tmp_path / "o" / "data.mindrecord")) == 2
    code, err = run_cli(tmp_path, capsys, "--strict", "--overwrite", tokenizer_name_or_path=tok.directory)
    assert code == 1
    (line,) = err.strip().splitlines()
    assert line == (f"mindrl preprocess: error: {tmp_path / 'd.jsonl'}:2: template_error: chat template "
                    f"{os.path.join(tok.directory, 'tokenizer_config.json')} raised: System role not supported")


def test_enable_thinking_is_refused_where_it_cannot_act(dirs, tmp_path, capsys):
    code, err = run_cli(tmp_path, capsys, tokenizer_name_or_path=dirs["chatml"][0].directory, enable_thinking=False)
    assert code == 2 and "enable_thinking: the chat template in" in err and "does not read enable_thinking" in err
    code, err = run_cli(tmp_path, capsys, tokenizer_name_or_path=dirs["qwen3"][0].directory, prompt_type="qwen2_5",
                        enable_thinking=True)
    assert code == 2 and "enable_thinking: prompt_type 'qwen2_5' has no thinking switch" in err
    code, err = run_cli(tmp_path, capsys, tokenizer_name_or_path=dirs["qwen3"][0].directory,
                        prompt_type_path=os.path.join(ROOT, "mindrl", "data", "templates.json"))
    assert code == 2 and "prompt_type_path: prompt_type hf renders with the tokenizer's own chat template" in err


def test_a_template_that_does_not_parse_names_its_file_and_line(bpe, tmp_path, capsys):
    d = make_dir(tmp_path / "broken", bpe, "chatml", template="{% for m in messages %}\n{{ m['content'] }",
                 where="jinja")
    code, err = run_cli(tmp_path, capsys, tokenizer_name_or_path=d)
    assert code == 2 and f"{os.path.join(d, 'chat_template.jinja')}: chat template line 2:" in err


def test_mindrl_preprocess_command(dirs, tmp_path):
    """The installed command, as a user runs it."""
    tok, ref = dirs["qwen2_5"]
    config = config_file(tmp_path, input=write_jsonl(tmp_path / "d.jsonl", ROWS[:1]), prompt_type="hf",
                         tokenizer_name_or_path=tok.directory, output_prefix=str(tmp_path / "p"), handler_name="r1")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-m", "mindrl.cli", "preprocess", "--config", config], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    want = ref.apply_chat_template([{"role": "user", "content": ROWS[0]["problem"]}], add_generation_prompt=True)
    want = want["input_ids"] if hasattr(want, "keys") else want
    assert read_back(tmp_path / "p.mindrecord")[0]["prompt_ids"].tolist() == list(want)


def test_vocab_merges_tokenizer_reads_its_directory_template(tmp_path):
    """A Qwen directory of vocab.json + merges.txt (no tokenizer.json) still finds its template."""
    from test_preprocess import _hf_qwen_dir
    d = _hf_qwen_dir(tmp_path / "q")
    shutil.copy(os.path.join(DATA, "qwen2_5.jinja"), os.path.join(d, "chat_template.jinja"))
    tok = load_tokenizer(os.path.join(d, "vocab.json"))
    ref = transformers.AutoTokenizer.from_pretrained(d)
    assert render("hf", "x^2 + 3x = 10, find x.", tokenizer=tok) == reference(
        ref, [{"role": "user", "content": "x^2 + 3x = 10, find x."}], add_generation_prompt=True)
    assert isinstance(TemplateRenderError("x"), TemplateError)


# ------------------------------------------------------------------------------------------ rollout stop ids
def _base_model_dir(path, bpe, template):
    """A base model's tokenizer: eos <|endoftext|>, while its chat template closes turns with <|im_end|>."""
    d = make_dir(path, bpe, "chatml", template=template)
    config = json.loads(open(os.path.join(d, "tokenizer_config.json")).read())
    config["eos_token"] = "<|endoftext|>"
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(config, f)
    return load_tokenizer(d)


def test_rollout_stops_at_the_templates_turn_end(bpe, tmp_path, caplog):
    from types import SimpleNamespace as NS
    from mindrl.trainer.context import RunContext

    def stops(tok):
        rollout = NS(stop_token_ids=(), max_tokens=8, min_tokens=0, do_sample=True, temperature=1.0, top_k=0,
                     top_p=1.0, repetition_penalty=1.0)
        plan = NS(rollout=rollout, batch=NS(samples_per_prompt=2))
        run = RunContext(None, None, tok, NS(eos_token_ids=[tok.eos_token_id]), 0, False, plan, 0)
        return run.sampling_params().stop_token_ids

    tok = _base_model_dir(tmp_path / "base", bpe, template_text("qwen2_5"))
    assert stops(tok) == sorted([tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|im_end|>")])
    assert stops(_base_model_dir(tmp_path / "none", bpe, "")) == [tok.token_to_id("<|endoftext|>")]
    with caplog.at_level("WARNING", logger="mindrl.train"):
        assert stops(_base_model_dir(tmp_path / "bad", bpe, "{{ raise_exception('no') }}")) == \
            [tok.token_to_id("<|endoftext|>")]
    assert "the tokenizer's chat template gives no stop token: chat template" in caplog.text
    assert "raised: no" in caplog.text


def test_generate_with_the_tokenizers_template(tmp_path, capsys):
    """`mindrl generate --template hf`: the tiny tokenizer with a ChatML template renders and generates; without a
    template the command says so in one line (exit 2)."""
    from mindrl.rollout.cli import generate_main
    tok_dir = tmp_path / "tok"
    shutil.copytree(os.path.join(ROOT, "examples", "tiny", "tokenizer"), tok_dir)
    model = os.path.join(ROOT, "model_configs", "tiny_qwen2.yaml")
    args = ["--model", model, "--tokenizer", str(tok_dir), "--prompt", "12+34-05=", "--template", "hf",
            "--max-new-tokens", "3", "--mode", "pynative"]
    assert generate_main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"mindrl generate: error: template hf: {tok_dir} has no chat template") and "\n" not in err
    shutil.copy(os.path.join(DATA, "chatml.jinja"), tok_dir / "chat_template.jinja")
    rc = generate_main(args)
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert get_template("hf", tokenizer=load_tokenizer(tok_dir)).stop_words == ("<|im_end|>",)
