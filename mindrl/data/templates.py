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
"""
from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field

__all__ = ["Template", "TemplateError", "get_template", "list_templates", "render", "render_messages",
           "build_messages", "DEFAULT_TEMPLATES_PATH"]

DEFAULT_TEMPLATES_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates.json")
_ROLES = ("system", "user", "assistant")


class TemplateError(ValueError):
    """Unknown template, or messages a template cannot render."""


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

    def render_messages(self, messages: list[dict], add_generation_prompt: bool = True,
                        enable_thinking: bool | None = None) -> str:
        """Render a conversation. A system prompt is the first message with role ``system``;
        without one the template's ``default_system`` (if any) is used."""
        messages = _check_messages(messages)
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


def _check_messages(messages) -> list[dict]:
    if not isinstance(messages, (list, tuple)) or not messages:
        raise TemplateError("messages must be a non-empty list of {'role', 'content'} dicts")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise TemplateError(f"message {i} is not a dict with 'role' and 'content': {m!r}")
        if m["role"] not in _ROLES:
            raise TemplateError(f"message {i} has role {m['role']!r}; supported roles: {', '.join(_ROLES)}")
        if not isinstance(m["content"], str):
            raise TemplateError(f"message {i} content is {type(m['content']).__name__}, not a string")
    return list(messages)


def build_messages(prompt, query: str = "", system: str | None = None, history=None) -> list[dict]:
    """Normalise the data shapes we accept into a message list.

    * ``prompt`` str, optional ``query`` (Alpaca "input") appended on a new line;
    * ``prompt`` as a list of ``{"role", "content"}`` messages (DAPO-Math-17k, OpenAI style);
    * ``history``: earlier turns as ``[[user, assistant], ...]`` pairs or as messages;
    * ``system``: overrides a system message in the data; ``None``/"" keeps the data's or the
      template default.
    """
    if isinstance(prompt, (list, tuple)):
        messages = _check_messages(prompt)
    elif isinstance(prompt, str):
        content = f"{prompt}\n{query}" if query else prompt
        messages = [{"role": "user", "content": content}]
    else:
        raise TemplateError(f"prompt must be a string or a list of messages, not {type(prompt).__name__}")
    head = []
    if messages[0]["role"] == "system":
        head, messages = [messages[0]], messages[1:]
    if system:
        head = [{"role": "system", "content": system}]
    past = []
    for i, turn in enumerate(history or []):
        if isinstance(turn, dict):
            past.append(turn)
        elif isinstance(turn, (list, tuple)) and len(turn) == 2:
            past += [{"role": "user", "content": turn[0]}, {"role": "assistant", "content": turn[1]}]
        else:
            raise TemplateError(f"history item {i} must be a [user, assistant] pair or a message dict")
    return _check_messages(head + past + messages)


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


def get_template(name: str | Template, path: str | None = None) -> Template:
    if isinstance(name, Template):
        return name
    templates = _load(os.path.abspath(path or DEFAULT_TEMPLATES_PATH))
    if name not in templates:
        raise TemplateError(f"unknown prompt_type {name!r}; available: {', '.join(sorted(templates))}")
    return templates[name]


def render(template_name, prompt=None, query: str = "", system: str | None = None, history=None,
           messages=None, enable_thinking: bool | None = None, templates_path: str | None = None) -> str:
    """Render a prompt with a template; the text ends with the assistant generation prefix.

    ``prompt`` is a string (with optional Alpaca-style ``query``) or a list of chat messages;
    ``messages=`` is accepted as another name for the latter.
    """
    if messages is not None:
        if prompt is not None:
            raise TemplateError("pass either prompt or messages, not both")
        prompt = messages
    return get_template(template_name, templates_path).render(
        prompt, query=query, system=system, history=history, enable_thinking=enable_thinking)


def render_messages(template_name, messages, add_generation_prompt: bool = True,
                    enable_thinking: bool | None = None, templates_path: str | None = None) -> str:
    return get_template(template_name, templates_path).render_messages(
        messages, add_generation_prompt=add_generation_prompt, enable_thinking=enable_thinking)
