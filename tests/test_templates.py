"""Chat templates against hand-written renderings of each model family's chat format."""
import json

import pytest

from mindrl.data.templates import TemplateError, get_template, list_templates, render, render_messages

Q = "What is 1+1?"
R1_INSTRUCTION = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. "
    "The assistant first thinks about the reasoning process in the mind and then provides the user with "
    "the answer. The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> "
    "tags, respectively, i.e., <think> reasoning process here </think><answer> answer here </answer>. "
    "Put your final answer within \\boxed{}.")

# Written out by hand from the published chat formats, not produced by the code under test.
EXPECTED_SINGLE_TURN = {
    "empty": "What is 1+1?",
    "default": "Human: What is 1+1?\nAssistant:",
    "chatml": "<|im_start|>user\nWhat is 1+1?<|im_end|>\n<|im_start|>assistant\n",
    "qwen": "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nWhat is 1+1?<|im_end|>\n<|im_start|>assistant\n",
    "qwen2_5": "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
               "<|im_start|>user\nWhat is 1+1?<|im_end|>\n<|im_start|>assistant\n",
    "qwen_r1": "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
               "<|im_start|>user\n" + R1_INSTRUCTION + "\nWhat is 1+1?<|im_end|>\n<|im_start|>assistant\n",
    "qwen_math_r1": "<|im_start|>system\nPlease reason step by step, and put your final answer within "
                    "\\boxed{}.<|im_end|>\n<|im_start|>user\nWhat is 1+1?<|im_end|>\n<|im_start|>assistant\n",
    "qwen3": "<|im_start|>user\nWhat is 1+1?<|im_end|>\n<|im_start|>assistant\n",
    "llama3": "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhat is 1+1?<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "alpaca": "Below is an instruction that describes a task. Write a response that appropriately completes "
              "the request.\n\n### Instruction:\nWhat is 1+1?\n\n### Response:\n",
    "deepseek3": "<｜begin▁of▁sentence｜><｜User｜>What is 1+1?<｜Assistant｜>",
    "deepseek_r1": "<｜begin▁of▁sentence｜><｜User｜>What is 1+1?<｜Assistant｜><think>\n",
}


@pytest.mark.parametrize("name", sorted(EXPECTED_SINGLE_TURN))
def test_single_turn(name):
    assert render(name, Q) == EXPECTED_SINGLE_TURN[name]


def test_required_templates_exist():
    required = {"empty", "default", "qwen", "qwen_r1", "qwen_math_r1", "qwen3", "llama3", "alpaca", "deepseek3"}
    assert required <= set(list_templates())
    assert set(EXPECTED_SINGLE_TURN) == set(list_templates()), "every template needs a hand-written test"


def test_qwen3_thinking_switch():
    off = render("qwen3", Q, enable_thinking=False)
    assert off == "<|im_start|>user\nWhat is 1+1?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert render("qwen3", Q, enable_thinking=True) == EXPECTED_SINGLE_TURN["qwen3"]


def test_qwen3_history_drops_reasoning():
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "<think>\nadd them\n</think>\n\n4"},
        {"role": "user", "content": "3+3?"},
    ]
    assert render("qwen3", messages) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\n2+2?<|im_end|>\n"
        "<|im_start|>assistant\n4<|im_end|>\n"
        "<|im_start|>user\n3+3?<|im_end|>\n"
        "<|im_start|>assistant\n")


def test_qwen_multi_turn_with_history_pairs_and_system():
    text = render("qwen", "3+3?", system="Be brief.", history=[["2+2?", "4"]])
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n"
                    "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
                    "<|im_start|>user\n3+3?<|im_end|>\n<|im_start|>assistant\n")


def test_llama3_system_and_trimming():
    text = render("llama3", "  hi  \n", system="You are terse.")
    assert text == ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
                    "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
                    "<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_deepseek3_system_and_history():
    text = render("deepseek3", "and 3+3?", system="Be brief.", history=[["2+2?", "4"]])
    assert text == ("<｜begin▁of▁sentence｜>Be brief.<｜User｜>2+2?<｜Assistant｜>4<｜end▁of▁sentence｜>"
                    "<｜User｜>and 3+3?<｜Assistant｜>")


def test_alpaca_query_and_default_template_system():
    assert render("alpaca", "Translate to French.", query="cat", system="Sys.\n\n") == (
        "Sys.\n\n### Instruction:\nTranslate to French.\ncat\n\n### Response:\n")
    assert render("default", "hi", system="Be nice.") == "Be nice.\nHuman: hi\nAssistant:"


def test_dapo_message_list_prompt():
    # DAPO-Math-17k rows carry the prompt as a list of chat messages
    prompt = [{"role": "user", "content": "Solve x+1=2.\n\nRemember to put your answer on its own line."}]
    assert render("qwen", prompt) == ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                                      "<|im_start|>user\nSolve x+1=2.\n\nRemember to put your answer on its own "
                                      "line.<|im_end|>\n<|im_start|>assistant\n")
    assert render("chatml", messages=prompt) == render("chatml", prompt)
    with_system = [{"role": "system", "content": "S"}] + prompt
    assert render("qwen", with_system).startswith("<|im_start|>system\nS<|im_end|>\n<|im_start|>user\n")
    # an explicit system argument overrides the one in the data
    assert render("qwen", with_system, system="T").startswith("<|im_start|>system\nT<|im_end|>\n")


def test_braces_and_placeholders_in_content_are_literal():
    text = "Put it in \\boxed{} and {content} and {0}"
    assert render("chatml", text) == f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


def test_response_text():
    assert get_template("qwen").response_text("4") == "4<|im_end|>"
    assert get_template("llama3").response_text("4") == "4<|eot_id|>"
    assert get_template("empty").response_text("145") == "145"


def test_render_messages_without_generation_prompt():
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    assert render_messages("chatml", msgs, add_generation_prompt=False) == (
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n")


def test_errors():
    with pytest.raises(TemplateError, match="unknown prompt_type 'nope'.*qwen"):
        render("nope", Q)
    with pytest.raises(TemplateError, match="role"):
        render("qwen", [{"role": "robot", "content": "x"}])
    with pytest.raises(TemplateError, match="not a string"):
        render("qwen", [{"role": "user", "content": 5}])
    with pytest.raises(TemplateError):
        render("qwen", [])
    with pytest.raises(TemplateError, match="string or a list"):
        render("qwen", 42)


def test_enable_thinking_only_where_a_template_has_the_switch():
    """A key that would change nothing is refused, not ignored: qwen3 has the switch, the others do not."""
    assert get_template("qwen3", enable_thinking=False).name == "qwen3"
    for name in ("qwen", "chatml", "llama3", "empty"):
        with pytest.raises(TemplateError, match=f"prompt_type '{name}' has no thinking switch"):
            get_template(name, enable_thinking=True)
        with pytest.raises(TemplateError, match="no thinking switch"):
            render(name, Q, enable_thinking=False)
    assert render("qwen", Q, enable_thinking=None) == EXPECTED_SINGLE_TURN["qwen"]


def test_hf_is_the_tokenizers_own_template():
    from mindrl.data.templates import check_prompt_type
    with pytest.raises(TemplateError, match="unknown prompt_type 'nope'.*or hf \\(the tokenizer's own chat template"):
        get_template("nope")
    with pytest.raises(TemplateError, match="pass the tokenizer"):
        render("hf", Q)
    check_prompt_type("hf")          # nothing to check before the tokenizer is there
    check_prompt_type("qwen3", enable_thinking=False)
    with pytest.raises(TemplateError, match="prompt_type_path: prompt_type hf"):
        check_prompt_type("hf", "my_templates.json")
    with pytest.raises(TemplateError, match="template name"):
        get_template(3)


def test_custom_templates_file(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"mine": {"user": "Q: {content}\n", "assistant_start": "A:"}}))
    assert render("mine", "hi", templates_path=str(path)) == "Q: hi\nA:"
    path.write_text(json.dumps({"bad": {"user": "{content}", "colour": "red"}}))
    with pytest.raises(TemplateError, match="colour"):
        get_template("bad", str(path))
