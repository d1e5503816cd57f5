"""Dataset handlers: one raw row (a dict) -> the fields written to the MindRecord.

A handler is chosen by ``handler_name``; each has a few names, including the MindSpeed-RL ones
(``R1AlpacaStyleInstructionHandler``...). ``map_keys`` tells a handler which raw keys hold the
prompt, query, system prompt and response; a key may be a dotted path into nested data
(``reward_model.ground_truth``, ``prompt.0.content``).

Handlers raise :class:`BadRow` for rows that cannot be used and :class:`Filtered` for rows over
a length limit; the caller counts both by reason.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .templates import Template, TemplateError, TemplateRenderError

__all__ = ["BadRow", "Filtered", "HandlerContext", "Handler", "register_handler", "get_handler",
           "list_handlers", "get_field", "field_name"]

_MISSING = object()


class BadRow(Exception):
    """A row that cannot be used: ``reason`` is a short counter key, ``detail`` says why."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail = reason, detail


class Filtered(BadRow):
    """A valid row dropped on purpose (too long). Not an error under --strict."""


@dataclass
class HandlerContext:
    tokenizer: Any
    template: Template
    map_keys: dict = field(default_factory=dict)
    additional_keys: list = field(default_factory=list)
    max_prompt_length: int | None = None
    seq_length: int | None = None
    append_eod: bool = False
    pad_to_max_length: bool = False
    pad_token_id: int | None = None      # None: the tokenizer's pad id
    enable_thinking: bool | None = None


def get_field(row: dict, key: str, default=_MISSING):
    """``row[key]``, or a walk down a dotted path (list items by index). Missing -> BadRow."""
    if key in row:
        return row[key]
    value = row
    for part in key.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, (list, tuple)) and part.lstrip("-").isdigit() and -len(value) <= int(part) < len(value):
            value = value[int(part)]
        else:
            if default is not _MISSING:
                return default
            raise BadRow("missing_key", f"no key {key!r}")
    return value


def field_name(key: str) -> str:
    """MindRecord field names allow only letters, digits, '_' and '-': 'reward_model.x' -> 'reward_model_x'."""
    return re.sub(r"[^A-Za-z0-9_]", "_", key)


def _as_label(value, key: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise BadRow("non_string", f"{key!r} is {type(value).__name__}, expected a string or number")


def _as_extra(value) -> str:
    # Additional keys are stored as strings; structured values as JSON so nothing is lost.
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False, default=str)


class Handler:
    """Base: renders the prompt with the template and tokenizes it."""

    names: tuple = ()
    default_map_keys: dict = {}

    def __init__(self, ctx: HandlerContext):
        self.ctx = ctx
        self.keys = {**self.default_map_keys, **(ctx.map_keys or {})}
        built_in = set(self.base_schema())
        # "labels" in dataset_additional_keys means the mapped response, which we always write
        self.extra_keys = [k for k in ctx.additional_keys if field_name(k) not in built_in]

    # -- schema -----------------------------------------------------------------------------------
    def base_schema(self) -> dict:
        return {"prompt_ids": {"type": "int32", "shape": [-1]}, "prompt_length": {"type": "int32"}}

    def schema(self) -> dict:
        schema = self.base_schema()
        for key in self.extra_keys:
            schema[field_name(key)] = {"type": "string"}
        return schema

    # -- helpers ----------------------------------------------------------------------------------
    def text(self, row: dict, role: str, required: bool) -> str:
        key = self.keys.get(role) or ""
        if not key:
            return ""
        value = get_field(row, key, default=_MISSING if required else None)
        if value is None and not required:
            return ""
        if not isinstance(value, str):
            raise BadRow("non_string", f"{key!r} is {type(value).__name__}, expected a string")
        return value

    def prompt_value(self, row: dict):
        """The prompt: a string, or a list of chat messages (DAPO style)."""
        key = self.keys.get("prompt") or ""
        if not key:
            raise BadRow("missing_key", "map_keys has no 'prompt'")
        value = get_field(row, key)
        if isinstance(value, str):
            if not value.strip():
                raise BadRow("empty_prompt", f"{key!r} is empty")
            return value
        if isinstance(value, (list, tuple)) and value and all(isinstance(m, dict) for m in value):
            if not any(isinstance(m.get("content"), str) and m.get("content", "").strip() for m in value):
                raise BadRow("empty_prompt", f"{key!r} has no non-empty message")
            return list(value)
        if isinstance(value, (list, tuple)) and not value:
            raise BadRow("empty_prompt", f"{key!r} is an empty list")
        raise BadRow("non_string", f"{key!r} is {type(value).__name__}, expected a string or a list of messages")

    def prompt_text(self, row: dict) -> str:
        history_key = self.keys.get("history") or ""
        history = get_field(row, history_key, default=None) if history_key else None
        try:
            return self.ctx.template.render(
                self.prompt_value(row), query=self.text(row, "query", required=False),
                system=self.text(row, "system", required=False) or None, history=history,
                enable_thinking=self.ctx.enable_thinking)
        except TemplateRenderError as e:      # the model's jinja refused this row (raise_exception)
            raise BadRow("template_error", str(e)) from None
        except TemplateError as e:
            raise BadRow("bad_messages", str(e)) from None

    def encode_prompt(self, row: dict) -> list[int]:
        ids = self.ctx.tokenizer.encode(self.prompt_text(row))
        limit = self.ctx.max_prompt_length
        if limit and len(ids) > limit:
            raise Filtered("prompt_too_long", f"{len(ids)} tokens > max_prompt_length {limit}")
        return ids

    def encode_response(self, text: str) -> list[int]:
        ids = self.ctx.tokenizer.encode(self.ctx.template.response_text(text))
        if self.ctx.append_eod:
            ids.append(self.ctx.tokenizer.eos_token_id)
        return ids

    def check_seq_length(self, n: int):
        limit = self.ctx.seq_length
        if limit and n > limit:
            raise Filtered("too_long", f"{n} tokens > seq_length {limit}")

    def extras(self, row: dict) -> dict:
        return {field_name(k): _as_extra(get_field(row, k)) for k in self.extra_keys}

    def __call__(self, row: dict) -> dict:
        raise NotImplementedError


_REGISTRY: dict[str, type] = {}


def register_handler(cls):
    for name in cls.names:
        _REGISTRY[name.lower()] = cls
    return cls


def get_handler(name: str) -> type:
    cls = _REGISTRY.get(str(name).lower())
    if cls is None:
        raise ValueError(f"unknown handler_name {name!r}; available: {', '.join(list_handlers())}")
    return cls


def list_handlers() -> list[str]:
    return sorted({cls.names[0] for cls in _REGISTRY.values()})


@register_handler
class PromptLabelsHandler(Handler):
    """Plain prompt + answer rows for GRPO: {"prompt": "53+93-01=", "labels": "145"}."""

    names = ("prompt", "PromptLabelsHandler")
    default_map_keys = {"prompt": "prompt", "query": "", "system": "", "response": "labels"}

    def base_schema(self):
        return {**super().base_schema(), "labels": {"type": "string"}}

    def label(self, row: dict) -> str:
        key = self.keys.get("response") or ""
        if not key:
            return ""
        value = get_field(row, key)
        if isinstance(value, dict) and "ground_truth" in value:
            # verl's and DAPO-Math-17k's reward_model column, {ground_truth, style}: MindSpeed-RL's math_17k.yaml maps
            # the response to it and means its ground_truth
            value = value["ground_truth"]
        return _as_label(value, key)

    def __call__(self, row):
        label = self.label(row)
        ids = self.encode_prompt(row)
        self.check_seq_length(len(ids))
        return {"prompt_ids": np.asarray(ids, np.int32), "prompt_length": len(ids), "labels": label,
                **self.extras(row)}


@register_handler
class R1Handler(PromptLabelsHandler):
    """Math/R1 prompts with a reference answer (DeepScaleR: problem / answer / solution)."""

    names = ("r1", "R1AlpacaStyleInstructionHandler", "deepscaler", "math")
    default_map_keys = {"prompt": "problem", "query": "", "system": "", "response": "answer"}


@register_handler
class Math17kHandler(PromptLabelsHandler):
    """DAPO-Math-17k parquet: prompt is a message list, answer in reward_model.ground_truth."""

    names = ("math17k", "Math17kAlpacaStyleInstructionHandler", "dapo", "dapo_math_17k")
    default_map_keys = {"prompt": "prompt", "query": "", "system": "", "response": "reward_model.ground_truth",
                        "data_source": "data_source"}

    def base_schema(self):
        return {**super().base_schema(), "data_source": {"type": "string"}}

    def __call__(self, row):
        out = super().__call__(row)
        key = self.keys.get("data_source") or ""
        out["data_source"] = _as_extra(get_field(row, key, default="")) if key else ""
        return out


@register_handler
class GSM8KHandler(PromptLabelsHandler):
    """GSM8K: the label is what follows '####' in the answer."""

    names = ("gsm8k", "GSM8KHandler")
    default_map_keys = {"prompt": "question", "query": "", "system": "", "response": "answer"}

    def label(self, row):
        answer = super().label(row)
        if "####" not in answer:
            raise BadRow("bad_answer", "answer has no '#### <final answer>' line")
        final = answer.rsplit("####", 1)[1].strip()
        if not final:
            raise BadRow("bad_answer", "nothing after '####' in the answer")
        return final


@register_handler
class PairwiseHandler(Handler):
    """Preference pairs for reward-model training. chosen_ids/rejected_ids are full sequences
    (prompt + response); prompt_length tells where the response starts."""

    names = ("pairwise", "AlpacaStylePairwiseHandler", "preference")
    default_map_keys = {"prompt": "prompt", "query": "", "system": "", "chosen": "chosen", "rejected": "rejected"}
    # MindRLHF / CValues rows use pos_resp / neg_resp
    fallback_keys = {"chosen": "pos_resp", "rejected": "neg_resp"}

    def base_schema(self):
        return {**super().base_schema(), "chosen_ids": {"type": "int32", "shape": [-1]},
                "rejected_ids": {"type": "int32", "shape": [-1]}}

    def response(self, row, role):
        key = self.keys[role]
        if get_field(row, key, default=None) is None and role not in (self.ctx.map_keys or {}):
            key = self.fallback_keys[role]
        value = get_field(row, key)
        if not isinstance(value, str):
            raise BadRow("non_string", f"{key!r} is {type(value).__name__}, expected a string")
        return value

    def __call__(self, row):
        chosen, rejected = self.response(row, "chosen"), self.response(row, "rejected")
        prompt = self.encode_prompt(row)
        chosen_ids = prompt + self.encode_response(chosen)
        rejected_ids = prompt + self.encode_response(rejected)
        self.check_seq_length(max(len(chosen_ids), len(rejected_ids)))
        return {"prompt_ids": np.asarray(prompt, np.int32), "prompt_length": len(prompt),
                "chosen_ids": np.asarray(chosen_ids, np.int32), "rejected_ids": np.asarray(rejected_ids, np.int32),
                **self.extras(row)}


@register_handler
class SFTHandler(Handler):
    """Instruction/response rows for a supervised warm-up, in MindRLHF's layout:
    pretrain_ids = prompt + response tokens, loss_mask = 1 on response tokens only.
    With pad_to_max_length, prompt_ids is padded to max_prompt_length and pretrain_ids/loss_mask
    to seq_length (MindRLHF's fixed shapes); pad id = tokenizer pad, mask 0."""

    names = ("sft", "AlpacaStyleInstructionHandler", "instruction")
    default_map_keys = {"prompt": "instruction", "query": "input", "system": "", "response": "output"}

    def base_schema(self):
        return {**super().base_schema(), "pretrain_ids": {"type": "int32", "shape": [-1]},
                "loss_mask": {"type": "int32", "shape": [-1]}}

    def __call__(self, row):
        response = self.text(row, "response", required=True)
        if not response.strip():
            raise BadRow("empty_response", f"{self.keys.get('response')!r} is empty")
        prompt = self.encode_prompt(row)
        full = prompt + self.encode_response(response)
        self.check_seq_length(len(full))
        mask = [0] * len(prompt) + [1] * (len(full) - len(prompt))
        return self.sft_row(row, prompt, full, mask)

    def sft_row(self, row: dict, prompt: list, full: list, mask: list) -> dict:
        """The MindRecord fields of one supervised row (padded to MindRLHF's fixed shapes with pad_to_max_length)."""
        prompt_out = prompt
        if self.ctx.pad_to_max_length:
            pad = self.ctx.pad_token_id
            if pad is None:
                pad = self.ctx.tokenizer.pad_token_id
            prompt_out = prompt + [pad] * (self.ctx.max_prompt_length - len(prompt))
            extra = self.ctx.seq_length - len(full)
            full, mask = full + [pad] * extra, mask + [0] * extra
        return {"prompt_ids": np.asarray(prompt_out, np.int32), "prompt_length": len(prompt),
                "pretrain_ids": np.asarray(full, np.int32), "loss_mask": np.asarray(mask, np.int32),
                **self.extras(row)}


# the speaker names of ShareGPT rows ("from"/"value") and of OpenAI-style messages ("role"/"content")
_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}


@register_handler
class ConversationSFTHandler(SFTHandler):
    """Multi-turn conversations for supervised fine-tuning, with the loss on every assistant turn: ShareGPT rows
    (``{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", "value": ...}], "system": ...}``, as
    MindSpeed-RL's and LLaMA-Factory's SharegptStyleInstructionHandler read them) or OpenAI-style ``messages``
    (``role``/``content``; set ``map_keys: {messages: messages}``).

    The tokens are the conversation as the template renders it: each assistant turn is the text after the
    template's generation prompt for the turns before it (loss 1, with the template's end of turn), and everything
    in between (user turns, system prompt, the next turn's header) has loss 0; ``append_eod`` adds the eos after
    the last assistant turn. Turns after the last assistant turn are dropped. A template that renders earlier
    turns differently once later ones follow (qwen3 drops the <think> part of past answers) cannot give every turn
    the context it was trained in: such rows are refused (train on one turn per row with handler ``sft``)."""

    names = ("sharegpt", "SharegptStyleInstructionHandler", "conversation")
    default_map_keys = {"messages": "conversations", "system": "system"}

    def messages(self, row: dict) -> list:
        key = self.keys.get("messages") or ""
        value = get_field(row, key)
        if not isinstance(value, (list, tuple)) or not value or not all(isinstance(m, dict) for m in value):
            raise BadRow("bad_messages", f"{key!r} is not a non-empty list of turns")
        out = []
        system = self.text(row, "system", required=False)
        if system:
            out.append({"role": "system", "content": system})
        for i, turn in enumerate(value):
            speaker = turn.get("from", turn.get("role"))
            content = turn.get("value", turn.get("content"))
            role = _ROLES.get(str(speaker).lower())
            if role is None:
                raise BadRow("bad_messages", f"{key}[{i}]: speaker {speaker!r} is not one of "
                                             f"{', '.join(sorted(_ROLES))} (tool turns are not supported)")
            if not isinstance(content, str):
                raise BadRow("bad_messages", f"{key}[{i}]: its text is {type(content).__name__}, expected a string")
            out.append({"role": role, "content": content})
        if not any(m["role"] == "assistant" for m in out):
            raise BadRow("empty_response", f"{key!r} has no assistant turn to learn")
        return out

    def __call__(self, row):
        turns = self.messages(row)
        last = max(i for i, m in enumerate(turns) if m["role"] == "assistant")
        tokenizer, template = self.ctx.tokenizer, self.ctx.template
        full, mask, said, prompt = [], [], "", None
        for i in range(last + 1):
            if turns[i]["role"] != "assistant":
                continue
            try:
                before = template.render_messages(turns[:i], add_generation_prompt=True,
                                                  enable_thinking=self.ctx.enable_thinking)
            except TemplateRenderError as e:
                raise BadRow("template_error", str(e)) from None
            except TemplateError as e:
                raise BadRow("bad_messages", str(e)) from None
            if not before.startswith(said):
                raise BadRow("template_rewrites_history", "the template renders earlier turns differently once "
                                                          "later ones follow; use handler sft, one turn per row")
            context = tokenizer.encode(before[len(said):])
            answer = tokenizer.encode(template.response_text(turns[i]["content"]))
            if i == last and self.ctx.append_eod:
                answer.append(tokenizer.eos_token_id)
            if prompt is None:
                prompt = list(context)
                limit = self.ctx.max_prompt_length
                if limit and len(prompt) > limit:
                    raise Filtered("prompt_too_long", f"{len(prompt)} tokens > max_prompt_length {limit}")
            full += context + answer
            mask += [0] * len(context) + [1] * len(answer)
            said = before + template.response_text(turns[i]["content"])
        self.check_seq_length(len(full))
        return self.sft_row(row, prompt, full, mask)


@register_handler
class MessagesSFTHandler(ConversationSFTHandler):
    """The same, for OpenAI-style rows: ``{"messages": [{"role": "user", "content": ...}, ...]}``."""

    names = ("messages", "sft_messages")
    default_map_keys = {"messages": "messages", "system": ""}
