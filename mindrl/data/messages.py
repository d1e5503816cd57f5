"""Chat messages: the data shapes a row may hold (a prompt string, a message list, a history) normalised to one list
of ``{"role", "content"}`` dicts, which both kinds of template (templates.py, chat_template.py) render."""
from __future__ import annotations

__all__ = ["TemplateError", "TemplateRenderError", "build_messages", "check_messages"]

_ROLES = ("system", "user", "assistant")


class TemplateError(ValueError):
    """Unknown template, or messages a template cannot render."""


class TemplateRenderError(TemplateError):
    """A row's messages made a jinja chat template fail (its raise_exception, or an error inside it)."""


def check_messages(messages) -> list[dict]:
    """``messages`` as a list, or TemplateError naming the first message that is not a role and a string."""
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
        messages = check_messages(prompt)
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
    return check_messages(head + past + messages)
