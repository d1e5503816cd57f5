"""``prompt_type: hf``: render prompts with the tokenizer directory's own chat template.

The template is the model's jinja: ``chat_template.jinja``, else ``tokenizer_config.json``'s ``chat_template``,
else ``chat_template.json`` (a processor's file), the first one found in the tokenizer's directory. It renders the
way transformers' ``apply_chat_template`` does (transformers/utils/chat_template_utils.py), without importing
transformers: jinja2's immutable sandbox with trim_blocks and lstrip_blocks, the loopcontrols extension, a
``{% generation %}`` tag that keeps its text, the globals ``raise_exception`` and ``strftime_now``, a ``tojson`` that
does not escape HTML, and the variables ``messages``, ``tools``, ``documents``, ``add_generation_prompt``, the
tokenizer's named special tokens (``bos_token``, ``eos_token``, ...) and any extra keyword (``enable_thinking``).

Where a response ends is read off the template itself: it renders a user turn and an assistant turn holding a
sentinel, and the text after the sentinel up to the first special token is the response end (``<|im_end|>`` for
ChatML, ``<|eot_id|>`` for Llama 3). That token is also the template's stop word.
"""
from __future__ import annotations

import functools
import json
import os
from datetime import datetime

from .messages import TemplateError, TemplateRenderError, build_messages
from .tokenizer import _read_json, _token_text

# Inside functions: jinja2, only for prompt_type hf (a model's own template)

__all__ = ["ChatTemplate", "find_chat_template", "load_chat_template", "turn_end_ids"]

NAME = "hf"
_SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
_SENTINEL = "MINDRL-RESPONSE-SENTINEL-7f3a"
_LOOKED_FOR = "chat_template.jinja, tokenizer_config.json's chat_template, chat_template.json"


def _pick(value, path: str) -> str | None:
    """A template string, or the ``default`` one of a list of named templates (transformers' rule)."""
    if isinstance(value, list):
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        if "default" not in named:
            raise TemplateError(f"{path}: chat_template holds named templates {sorted(map(str, named))} but no "
                                f"'default' one")
        value = named["default"]
    if value is not None and not isinstance(value, str):
        raise TemplateError(f"{path}: chat_template is {type(value).__name__}, not a jinja string")
    return value or None


def find_chat_template(directory: str, tokenizer_config: dict | None = None) -> tuple[str, str] | None:
    """``(template text, the file it came from)`` for a tokenizer directory, or None when it has none."""
    jinja = os.path.join(directory, "chat_template.jinja")
    if os.path.isfile(jinja):
        with open(jinja, encoding="utf-8") as f:
            return f.read(), jinja
    config_path = os.path.join(directory, "tokenizer_config.json")
    if tokenizer_config is None:
        tokenizer_config = _read_json(config_path) if os.path.isfile(config_path) else {}
    text = _pick(tokenizer_config.get("chat_template"), config_path)
    if text:
        return text, config_path
    processor = os.path.join(directory, "chat_template.json")
    if os.path.isfile(processor):
        data = _read_json(processor)
        text = _pick(data.get("chat_template") if isinstance(data, dict) else None, processor)
        if text:
            return text, processor
    return None


def special_token_variables(directory: str, tokenizer_config: dict) -> dict:
    """The named special tokens transformers passes to a template: tokenizer_config.json's, with a legacy
    special_tokens_map.json on top when the config has no added_tokens_decoder (as transformers reads them)."""
    values = {k: tokenizer_config.get(k) for k in _SPECIAL_KEYS}
    if isinstance(tokenizer_config.get("extra_special_tokens"), dict):   # model-specific names (image_token, ...)
        values.update(tokenizer_config["extra_special_tokens"])
    legacy = os.path.join(directory, "special_tokens_map.json")
    if "added_tokens_decoder" not in tokenizer_config and os.path.isfile(legacy):
        data = _read_json(legacy)
        values.update({k: v for k, v in data.items() if k in _SPECIAL_KEYS})
        if isinstance(data.get("extra_special_tokens"), dict):
            values.update(data["extra_special_tokens"])
    return {k: _token_text(v) for k, v in values.items() if _token_text(v) is not None}


@functools.lru_cache(maxsize=1)
def _environment():
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationTag(Extension):
        # {% generation %} marks assistant text for transformers' assistant masks; rendering keeps the text.
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return nodes.CallBlock(self.call_method("_keep"), [], [], body).set_lineno(lineno)

        def _keep(self, caller):
            return caller()

    class TemplateDict:
        # dict() and dict.fromkeys() only: templates come from the Hub and must not reach the real type.
        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, *args, **kwargs):
            return dict.fromkeys(*args, **kwargs)

    class Namespace(jinja2.utils.Namespace):
        # No underscore names, so a template cannot set CPython internals on a namespace.
        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                Namespace.check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            Namespace.check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def check(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"a chat template cannot set {name!r} on a namespace")

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # jinja's own tojson escapes <, >, & for HTML; chat templates want the text as it is.
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, strftime_now=lambda fmt: datetime.now().strftime(fmt),
                       dict=TemplateDict(), namespace=Namespace)
    return env


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split()) or type(e).__name__


class ChatTemplate:
    """A tokenizer directory's chat template, used where a templates.json :class:`Template` is."""

    name = NAME

    def __init__(self, text: str, source: str, variables: dict, special_tokens: dict):
        import jinja2
        from jinja2 import meta

        self.source, self.variables = source, dict(variables)
        env = _environment()
        try:
            self.reads = frozenset(meta.find_undeclared_variables(env.parse(text)))
            self._template = env.from_string(text)
        except jinja2.TemplateSyntaxError as e:
            raise TemplateError(f"{source}: chat template line {e.lineno}: {_one_line(e)}") from None
        self.strip_content, self.response_end, self.stop_words = self._turn_end(special_tokens)

    def _turn_end(self, special_tokens: dict) -> tuple[bool, str, tuple]:
        padded = f" {_SENTINEL} "
        try:
            text = self.render_messages([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": padded}],
                                        add_generation_prompt=False)
        except TemplateRenderError as e:
            raise TemplateError(f"{e}, rendering a user and an assistant message to find where a response ends") \
                from None
        if padded in text:
            strip, tail = False, text.rsplit(padded, 1)[1]
        elif _SENTINEL in text:          # the template trims message text (Llama 3)
            strip, tail = True, text.rsplit(_SENTINEL, 1)[1]
        else:
            raise TemplateError(f"{self.source}: the chat template does not render an assistant message's content, "
                                f"so where a response ends is unknown")
        found = [(tail.find(t), -len(t), t) for t in special_tokens if t and t in tail]
        if not found:                    # no turn-end token: nothing closes a response but the eos
            return strip, "", ()
        at, _, token = min(found)        # the first special token; the longest one starting there
        return strip, tail[:at + len(token)], (token,)

    def check_enable_thinking(self, value):
        if value is not None and "enable_thinking" not in self.reads:
            raise TemplateError(f"enable_thinking: the chat template in {self.source} does not read "
                                f"enable_thinking, so it would change nothing; remove the key")

    def render_messages(self, messages: list[dict], add_generation_prompt: bool = True,
                        enable_thinking: bool | None = None, tools=None, documents=None, **kwargs) -> str:
        """Render a conversation as ``apply_chat_template(messages, tokenize=False, ...)`` does; keyword arguments
        (``enable_thinking`` when set, ``date_string``, ...) become template variables."""
        import jinja2
        self.check_enable_thinking(enable_thinking)
        if enable_thinking is not None:
            kwargs["enable_thinking"] = enable_thinking
        # transformers drops None values: a parquet row gives every message each key of its struct
        messages = [{k: v for k, v in m.items() if v is not None} for m in messages]
        try:
            return self._template.render(messages=messages, tools=tools, documents=documents,
                                         add_generation_prompt=add_generation_prompt, **{**self.variables, **kwargs})
        except (jinja2.TemplateError, TypeError, ValueError, LookupError, AttributeError) as e:
            raise TemplateRenderError(f"chat template {self.source} raised: {_one_line(e)}") from None

    def render(self, prompt, query: str = "", system: str | None = None, history=None,
               enable_thinking: bool | None = None) -> str:
        """Prompt text ending with the generation prompt; without a system prompt in the data the template's own
        default (if any) applies."""
        messages = build_messages(prompt, query=query, system=system, history=history)
        return self.render_messages(messages, add_generation_prompt=True, enable_thinking=enable_thinking)

    def response_text(self, response: str) -> str:
        """A training target: the response as the template writes it, then the response end."""
        return (response.strip() if self.strip_content else response) + self.response_end


def load_chat_template(tokenizer) -> ChatTemplate:
    """The chat template of a tokenizer loaded with :func:`mindrl.data.load_tokenizer`."""
    found = find_chat_template(tokenizer.directory, tokenizer.tokenizer_config)
    if found is None:
        raise TemplateError(f"template hf: {tokenizer.directory} has no chat template (looked for {_LOOKED_FOR}); "
                            f"put the model's chat_template.jinja there, or name a built-in template such as "
                            f"qwen2_5 or chatml")
    variables = special_token_variables(tokenizer.directory, tokenizer.tokenizer_config)
    return ChatTemplate(found[0], found[1], variables, tokenizer.special_tokens)


def turn_end_ids(tokenizer) -> list[int]:
    """Token ids that close an assistant turn in the tokenizer's own chat template ([] without one)."""
    if find_chat_template(tokenizer.directory, tokenizer.tokenizer_config) is None:
        return []
    ids = (tokenizer.token_to_id(t) for t in load_chat_template(tokenizer).stop_words)
    return [int(i) for i in ids if i is not None]
