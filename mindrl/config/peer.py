"""Reading another framework's config keys with that framework's meaning: the rule table's vocabulary.

A peer key (MindSpeed-RL's ``rl_config.init_kl_coef``, a MindFormers model key, ...) either sets a mindrl key, is
accepted because no value of it changes what mindrl computes, is accepted only with the values that say what
mindrl does, or is refused with the reason. Nothing is accepted and then silently ignored: every accepted key
that mindrl does not act on becomes a note in the start-up plan.

Standard library only (runs in msrun's scheduler process before ``init()``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

NO_DEFAULT = object()


class PeerValueError(ValueError):
    """A peer key's value mindrl cannot honour; the message says why and what to write instead."""


@dataclass(frozen=True)
class Rule:
    """What mindrl does with one peer key.

    ``to``: the mindrl key its value sets (through ``convert`` when given; ``convert`` raises PeerValueError for
    values it cannot honour). ``ok``: the values accepted although mindrl does nothing with the key (they are what
    mindrl does anyway). ``any``: every value is accepted because none changes what mindrl computes. Neither:
    refused. ``why`` says why mindrl does not act on the key (for the note or the refusal). ``default``: the peer's
    own default, which a peer file that omits the key gets (its author wrote the file against it).
    """
    to: Optional[str] = None
    convert: Optional[Callable[[Any], Any]] = None
    ok: Optional[tuple] = None
    any: bool = False
    why: str = ""
    default: Any = NO_DEFAULT

    def describe(self) -> str:
        """One line for the docs' key table: what mindrl does with the key."""
        if self.to:
            return f"sets `{self.to}`" + (f" ({self.why})" if self.why else "")
        if self.any and self.why.startswith("checked: "):
            return f"not used, checked against the run: {self.why[len('checked: '):]}"
        if self.any:
            return f"accepted, no effect: {self.why}"
        if self.ok:
            return f"accepted as {' or '.join(show(v) for v in self.ok)}: {self.why}; other values refused"
        return f"refused: {self.why}"


def show(value: Any) -> str:
    """A value as a yaml user writes it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(show(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {show(v)}" for k, v in value.items()) + "}"
    return repr(value)


def same_value(a: Any, b: Any) -> bool:
    """Equal as yaml values: booleans never equal numbers, 1 == 1.0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return a == b


def judge(rule: Rule, key: str, value: Any) -> tuple:
    """(converted value or None, note or None, error or None) for ``key: value`` under ``rule``."""
    if rule.to:
        if rule.convert is None:
            return value, None, None
        try:
            return rule.convert(value), None, None
        except PeerValueError as exc:
            return None, None, f"{show(value)}: {exc}"
    if rule.any:
        return None, f"{key}: {show(value)} ({rule.why})", None
    if rule.ok is not None and any(same_value(value, v) for v in rule.ok):
        return None, f"{key}: {show(value)} ({rule.why})", None
    if rule.ok:
        accepted = " or ".join(show(v) for v in rule.ok)
        return None, None, (f"{show(value)} is not used by mindrl because {rule.why} ({accepted} is accepted: that "
                            f"is what mindrl does)")
    return None, None, f"not used by mindrl because {rule.why}; remove it"


def number(value: Any) -> Any:
    """A yaml number, also when PyYAML-style readers left ``1e-6`` as text (MindSpeed-RL's loader reads it as a
    float, as mindrl's does; a model yaml read elsewhere may still carry it as a string)."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise PeerValueError("expected a number") from None
    return value
