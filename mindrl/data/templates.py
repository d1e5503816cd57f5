"""Chat templates: turn a prompt (or a list of chat messages) into the exact text a model expects.

The templates live in ``templates.json`` next to this file (``prompt_type_path`` points at another
file with the same schema). Each entry gives the text around every turn:

* ``bos``              text emitted once at the start (Llama 3, DeepSeek put their BOS in the template)
* ``system``/``user``  formats with a ``{content}`` placeholder
* ``default_system``   used when the data has no system prompt
* ``assistant_start``  the generation prefix: a rendered prompt ends with it
* ``assistant_end``    closes an assistant turn inside a conversation history
* ``response_end``     what a trained response must end with (the turn-end token, e.g. ``<|im_end|>``)
* ``thinking_on`` / ``thinking_off`` / ``thinking_default``  text after the generation prefix
  (Qwen3's ``enable_thinking=False`` renders an empty think block)
* ``strip_content``    trim message text (Llama 3 does)
* ``strip_history_think``  drop ``<think>...</think>`` from earlier assistant turns (Qwen3, R1)

``hf`` is not in the file: it is the tokenizer directory's own jinja chat template (see chat_template.py).
"""
from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field

from .chat_template import load_chat_template
from .messages import TemplateError, TemplateRenderError, build_messages, check_messages

__all__ = ["Template", "TemplateError", "TemplateRenderError", "HF_TEMPLATE", "get_template", "check_prompt_type",
           "list_templates", "render", "render_messages", "build_messages", "DEFAULT_TEMPLATES_PATH"]

DEFAULT_TEMPLATES_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates.json")
HF_TEMPLATE = "hf"     # the tokenizer's own chat template


@dataclass(frozen=True)
class Template:
    name: str
    user: str
    system: str = "{content}"
    default_system: str = ""
    bos: str = ""
    assistant_start: str = ""
    assistant_end: str = ""
    response_end: str = ""
    thinking_on: str = ""
    thinking_off: str = ""
    thinking_default: bool = True
    strip_content: bool = False
    strip_history_think: bool = False
    stop_words: tuple = ()
    description: str = field(default="", compare=False)

    def _fill(self, fmt: str, content: str) -> str:
        # str.replace, not str.format: prompts are full of braces (\boxed{}, code, JSON).
        return fmt.replace("{content}", content.strip() if self.strip_content else content)

    def check_enable_thinking(self, value):
        if value is not None and self.thinking_on == self.thinking_off:
            raise TemplateError(f"enable_thinking: prompt_type {self.name!r} has no thinking switch, so it would "
                                f"change nothing; remove the key, or use qwen3 or hf with a template that reads it")

    def render_messages(self, messages: list[dict], add_generation_prompt: bool = True,
                        enable_thinking: bool | None = None) -> str:
        """Render a conversation. A system prompt is the first message with role ``system``;
        without one the template's ``default_system`` (if any) is used."""
        self.check_enable_thinking(enable_thinking)
        messages = check_messages(messages)
        parts = [self.bos]
        if messages and messages[0]["role"] == "system":
            system, messages = messages[0]["content"], messages[1:]
        else:
            system = ""
        system = system or self.default_system
        if system:
            parts.append(self._fill(self.system, system))
        for message in messages:
            role, content = message["role"], message["content"]
            if role == "user":
                parts.append(self._fill(self.user, content))
            elif role == "assistant":
                if self.strip_history_think and "</think>" in content:
                    content = content.split("</think>")[-1].lstrip("\n")
                parts.append(self.assistant_start + self._fill("{content}", content) + self.assistant_end)
            else:  # a system message after the first one
                parts.append(self._fill(self.system, content))
        if add_generation_prompt:
            parts.append(self.assistant_start)
            thinking = self.thinking_default if enable_thinking is None else enable_thinking
            parts.append(self.thinking_on if thinking else self.thinking_off)
        return "".join(parts)

    def render(self, prompt, query: str = "", system: str | None = None, history=None,
               enable_thinking: bool | None = None) -> str:
        """Prompt text ending with the assistant generation prefix. See :func:`render`."""
        messages = build_messages(prompt, query=query, system=system, history=history)
        return self.render_messages(messages, add_generation_prompt=True, enable_thinking=enable_thinking)

    def response_text(self, response: str) -> str:
        """A training target: the response followed by the template's end-of-turn text."""
        return self._fill("{content}", response) + self.response_end


def _load(path: str) -> dict[str, Template]:
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        raise TemplateError(f"{path}: templates file not found") from None
    # keyed by mtime and size too, so an edited file is re-read
    return _parse(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _parse(path: str, _mtime: int, _size: int) -> dict[str, Template]:
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except json.JSONDecodeError as e:
        raise TemplateError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(raw, dict):
        raise TemplateError(f"{path}: expected a JSON object mapping template names to their formats "
                            f"(see mindrl/data/templates.json; MindSpeed-RL's list format is not read)")
    known = set(Template.__dataclass_fields__) - {"name"}
    out = {}
    for name, spec in raw.items():
        unknown = set(spec) - known
        if unknown:
            raise TemplateError(f"{path}: template {name!r} has unknown keys {sorted(unknown)}")
        if "user" not in spec:
            raise TemplateError(f"{path}: template {name!r} needs a 'user' format")
        spec = dict(spec, stop_words=tuple(spec.get("stop_words", ())))
        out[name] = Template(name=name, **spec)
    return out


def list_templates(path: str | None = None) -> list[str]:
    return sorted(_load(os.path.abspath(path or DEFAULT_TEMPLATES_PATH)))


def check_prompt_type(name: str, path: str | None = None, enable_thinking: bool | None = None):
    """Everything about a prompt_type that can be checked without the tokenizer (hf's template lives with it)."""
    if name == HF_TEMPLATE:
        if path:
            raise TemplateError("prompt_type_path: prompt_type hf renders with the tokenizer's own chat template, "
                                "not a templates file; remove prompt_type_path")
        return
    get_template(name, path, enable_thinking=enable_thinking)


def get_template(name, path: str | None = None, tokenizer=None, enable_thinking: bool | None = None):
    """A template by name: one of templates.json's, or ``hf``, the chat template of ``tokenizer``'s directory.
    ``enable_thinking`` is refused (TemplateError) by a template it would not change."""
    if name == HF_TEMPLATE:
        check_prompt_type(name, path)
        if tokenizer is None:
            raise TemplateError("prompt_type hf renders with the tokenizer's own chat template: pass the tokenizer")
        template = load_chat_template(tokenizer)
    elif isinstance(name, str):
        templates = _load(os.path.abspath(path or DEFAULT_TEMPLATES_PATH))
        if name not in templates:
            raise TemplateError(f"unknown prompt_type {name!r}; available: {', '.join(sorted(templates))}, "
                                f"or {HF_TEMPLATE} (the tokenizer's own chat template)")
        template = templates[name]
    elif hasattr(name, "render_messages"):
        template = name              # a Template or ChatTemplate already
    else:
        raise TemplateError(f"prompt_type must be a template name, got {name!r}")
    template.check_enable_thinking(enable_thinking)
    return template


def render(template_name, prompt=None, query: str = "", system: str | None = None, history=None,
           messages=None, enable_thinking: bool | None = None, templates_path: str | None = None,
           tokenizer=None) -> str:
    """Render a prompt with a template; the text ends with the assistant generation prefix.

    ``prompt`` is a string (with optional Alpaca-style ``query``) or a list of chat messages;
    ``messages=`` is accepted as another name for the latter. ``hf`` needs ``tokenizer``.
    """
    if messages is not None:
        if prompt is not None:
            raise TemplateError("pass either prompt or messages, not both")
        prompt = messages
    return get_template(template_name, templates_path, tokenizer).render(
        prompt, query=query, system=system, history=history, enable_thinking=enable_thinking)


def render_messages(template_name, messages, add_generation_prompt: bool = True,
                    enable_thinking: bool | None = None, templates_path: str | None = None, tokenizer=None) -> str:
    return get_template(template_name, templates_path, tokenizer).render_messages(
        messages, add_generation_prompt=add_generation_prompt, enable_thinking=enable_thinking)
