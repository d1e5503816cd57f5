"""Load, override, resolve and validate a training config.

Pipeline (all before anything touches mindspore):

1. parse the yaml with a strict loader (YAML 1.2 booleans, ``1e-5`` is a float, duplicate keys
   are errors);
2. move alias spellings (MindSpeed-RL / MindRLHF habits) onto their canonical keys;
3. apply ``section.key=value`` command-line overrides;
4. walk the dataclass schema: unknown keys, types, choices and bounds;
5. fill derived defaults, then check rules spanning several keys and the files the run needs.

Every problem found in a phase is reported at once in one :class:`ConfigError`, one line per
problem, each line ``<config file>: <dotted.key>: <what is wrong>``.
"""
from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import os
import re
import types
import typing
from pathlib import Path
from typing import Any, Iterable, Union

import yaml

from mindrl.config.schema import SECTIONS, ConfigError, TrainConfig

# --------------------------------------------------------------------------------------------
# yaml flavour

_BOOL_TAG = "tag:yaml.org,2002:bool"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_BOOL_RE = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
# PyYAML's YAML 1.1 float pattern needs a dot, so `1e-5` would load as a string.
_FLOAT_RE = re.compile(r"""^(?:
      [-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    | [-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
    | [-+]?\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?
    | [-+]?\.(?:inf|Inf|INF)
    | \.(?:nan|NaN|NAN))$""", re.X)


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans, exponent floats and duplicate-key detection."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *anchor` keys may be overridden by explicit ones
                key = self.construct_object(key_node, deep=True)
                try:
                    if key in seen:
                        raise yaml.constructor.ConstructorError(
                            "while constructing a mapping", node.start_mark,
                            f"duplicate key {key!r} (first given on line {seen[key] + 1})",
                            key_node.start_mark)
                    seen[key] = key_node.start_mark.line
                except TypeError:  # unhashable key; the schema walker reports it
                    pass
        return super().construct_mapping(node, deep)


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in (_BOOL_TAG, _FLOAT_TAG)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(_BOOL_TAG, _BOOL_RE, list("tTfF"))
_Loader.add_implicit_resolver(_FLOAT_TAG, _FLOAT_RE, list("-+0123456789."))


class _Dumper(yaml.SafeDumper):
    """Quotes every string that either PyYAML's default loader or :class:`_Loader` would
    read back as something other than a string. Never writes anchors."""

    def ignore_aliases(self, data):
        return True


_Dumper.add_implicit_resolver(_FLOAT_TAG, _FLOAT_RE, list("-+0123456789."))


def parse_yaml(text: str, source: str = "<string>") -> Any:
    """Parse yaml text with mindrl's rules; syntax errors become :class:`ConfigError`."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader derives from SafeLoader
    except yaml.YAMLError as exc:
        detail = " ".join(str(exc).split())
        raise ConfigError(f"{source}: invalid YAML: {detail}") from None


def dump_yaml(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True,
                     default_flow_style=None)


# --------------------------------------------------------------------------------------------
# aliases

# alias dotted key -> canonical dotted key
ALIASES: dict[str, str] = {
    "seed": "runtime.seed",
    "rl_config.algorithm": "rl_config.adv_estimator",
    "rl_config.init_kl_coef": "rl_config.kl_coef",
    "rl_config.integrated_mode_config.ref_model_load_path": "ref.ref_model_load_path",
    "rl_config.max_prompt_length": "generate_config.max_prompt_length",
    "rl_config.use_tensorboard": "logging.tensorboard",
    "generate_config.sampling_config.max_tokens": "generate_config.max_tokens",
    "generate_config.sampling_config.min_tokens": "generate_config.min_tokens",
    "generate_config.sampling_config.temperature": "generate_config.temperature",
    "generate_config.sampling_config.top_k": "generate_config.top_k",
    "generate_config.sampling_config.top_p": "generate_config.top_p",
    "generate_config.sampling_config.repetition_penalty": "generate_config.repetition_penalty",
}

# mappings that exist only to hold aliases, e.g. rl_config.integrated_mode_config
_ALIAS_CONTAINERS: dict[str, list[str]] = {}
for _alias in ALIASES:
    _parts = _alias.split(".")
    if len(_parts) == 3:
        _ALIAS_CONTAINERS.setdefault(".".join(_parts[:2]), []).append(_parts[2])

# hints for sections of other frameworks' configs
_SECTION_HINTS = {
    "megatron_training": "mindrl has no megatron_training section; its keys live at "
                         "global_batch_size -> rl_config.global_batch_size, "
                         "tokenizer_name_or_path -> actor_config.tokenizer_name_or_path, "
                         "data_path -> data.path (a .mindrecord from `mindrl preprocess`), "
                         "seed -> runtime.seed",
    "defaults": "pick the model with actor_config.model (a name in model_configs/ or a path)",
    "critic_config": "a critic (PPO) is not supported yet",
}

_MISSING_SECTION = object()


# --------------------------------------------------------------------------------------------
# error collection

class _Errors:
    def __init__(self, source: str):
        self.source = source
        self.lines: list[str] = []
        self.origin: dict[str, str] = {}  # canonical dotted key -> override text that set it

    def add(self, key: str, msg: str) -> None:
        note = ""
        base = key.split("[", 1)[0]
        if base in self.origin:
            note = f" (set by command-line override {self.origin[base]!r})"
        self.lines.append(f"{self.source}: {key}: {msg}{note}")

    def raise_if_any(self) -> None:
        if self.lines:
            raise ConfigError("\n".join(self.lines), self.lines)


def _show(value: Any) -> str:
    """A value the way the user would have written it in yaml."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        text = repr(value)
    elif isinstance(value, list):
        text = "[" + ", ".join(_show(v) for v in value) + "]"
    elif isinstance(value, dict):
        text = "{" + ", ".join(f"{k}: {_show(v)}" for k, v in value.items()) + "}"
    else:
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _type_word(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return {int: "integer", float: "number", str: "string", list: "list", dict: "mapping"}.get(
        type(value), type(value).__name__)


def _fmt_num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(x)


# --------------------------------------------------------------------------------------------
# schema helpers

def _section_fields(section: str) -> dict[str, dataclasses.Field]:
    cls = typing.get_type_hints(TrainConfig)[section]
    return {f.name: f for f in dataclasses.fields(cls)}


def _all_keys() -> list[str]:
    keys = [f"{s}.{k}" for s in SECTIONS for k in _section_fields(s)]
    return keys + list(ALIASES)


def _field_type(section: str, key: str) -> Any:
    cls = typing.get_type_hints(TrainConfig)[section]
    return typing.get_type_hints(cls)[key]


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0], len(args) < len(typing.get_args(tp))
    return tp, False


def _suggest(key: str, section: str | None) -> str:
    """' did you mean ...?' for an unknown key (in ``section``, or top level when None)."""
    if section is None:
        close = difflib.get_close_matches(key, list(SECTIONS) + ["seed"], n=1)
        return f"; did you mean {close[0]!r}?" if close else ""
    elsewhere = [s for s in SECTIONS if s != section and key in _section_fields(s)]
    if elsewhere:
        return f"; did you mean '{elsewhere[0]}.{key}'?"
    names = list(_section_fields(section))
    names += [a.split(".", 1)[1] for a in ALIASES if a.startswith(section + ".")]
    close = difflib.get_close_matches(key, names, n=1)
    if close:
        return f"; did you mean '{section}.{close[0]}'?"
    leaves = {k.rsplit(".", 1)[1]: k for k in reversed(_all_keys()) if "." in k}
    close = difflib.get_close_matches(key, list(leaves), n=1)
    if close:
        return f"; did you mean {leaves[close[0]]!r}?"
    return ""


# --------------------------------------------------------------------------------------------
# aliases and overrides on the raw dict

def _get_path(raw: dict, parts: list[str]) -> Any:
    node: Any = raw
    for part in parts:
        if not isinstance(node, dict) or part not in node:
            return _MISSING_SECTION
        node = node[part]
    return node


def _section_dict(raw: dict, section: str) -> dict | None:
    """raw[section] as a dict (created if absent or null); None when it is something else."""
    node = raw.get(section)
    if node is None:
        node = raw[section] = {}
    return node if isinstance(node, dict) else None


def _canonicalize(raw: dict, err: _Errors) -> None:
    """Move alias spellings onto their canonical keys, in place."""
    for alias, canonical in ALIASES.items():
        parts = alias.split(".")
        parent = _get_path(raw, parts[:-1]) if len(parts) > 1 else raw
        if not isinstance(parent, dict) or parts[-1] not in parent:
            continue
        value = parent.pop(parts[-1])
        section, key = canonical.split(".")
        target = _section_dict(raw, section)
        if target is None:
            continue  # the walker reports the malformed section
        if key in target and target[key] != value:
            err.add(alias, f"{_show(value)} conflicts with {canonical}: {_show(target[key])} "
                           f"({alias} is an alias of {canonical}; give only one)")
            continue
        target[key] = value
    for container, children in _ALIAS_CONTAINERS.items():
        section, name = container.split(".")
        parent = raw.get(section)
        if not isinstance(parent, dict) or name not in parent:
            continue
        rest = parent.pop(name)
        if rest is None:
            continue
        if not isinstance(rest, dict):
            err.add(container, f"expected a mapping, got {_show(rest)}")
            continue
        for extra in rest:
            close = difflib.get_close_matches(str(extra), children, n=1)
            hint = f"; did you mean '{container}.{close[0]}'?" if close else \
                f"; mindrl reads only {', '.join(children)} here"
            err.add(f"{container}.{extra}", f"unknown key{hint}")


def parse_override(text: str) -> tuple[str, str]:
    """Split ``section.key=value`` into the key and the (still unparsed) value text."""
    key, sep, value_text = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"command-line override {text!r}: expected section.key=value, "
                          f"e.g. rl_config.kl_coef=0.01")
    return key, value_text


def _apply_overrides(raw: dict, overrides: Iterable[str], err: _Errors) -> None:
    for text in overrides:
        try:
            key, value_text = parse_override(text)
        except ConfigError as exc:
            err.lines.append(f"{err.source}: {exc}")
            continue
        canonical = ALIASES.get(key, key)
        parts = canonical.split(".")
        if len(parts) != 2 or parts[0] not in SECTIONS or parts[1] not in _section_fields(parts[0]):
            close = difflib.get_close_matches(key, _all_keys(), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            if len(parts) == 1 and parts[0] in SECTIONS:
                hint = f"; override one key inside it, e.g. {parts[0]}.<key>=<value>"
            err.add(key, f"unknown key in command-line override {text!r}{hint}")
            continue
        section, name = parts
        try:
            value = yaml.load(value_text, Loader=_Loader)  # noqa: S506
        except yaml.YAMLError as exc:
            err.add(canonical, f"cannot parse value {value_text!r} of command-line override: "
                               f"{' '.join(str(exc).split())}")
            continue
        tp, _ = _strip_optional(_field_type(section, name))
        if tp is str and value is not None and not isinstance(value, str):
            value = value_text  # e.g. logging.name=007 stays "007"
        target = _section_dict(raw, section)
        if target is None:
            err.add(section, f"expected a mapping, got {_show(raw[section])}")
            continue
        target[name] = value
        err.origin[canonical] = text


# --------------------------------------------------------------------------------------------
# generic schema walker

_BAD = object()


def _check_scalar(value: Any, tp: Any, meta: dict, key: str, err: _Errors) -> Any:
    if value is None:
        err.add(key, "must not be null")
        return _BAD
    if tp is bool:
        if not isinstance(value, bool):
            err.add(key, f"expected true or false, got {_show(value)} ({_type_word(value)})")
            return _BAD
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            err.add(key, f"expected an integer, got {_show(value)} ({_type_word(value)})")
            return _BAD
    elif tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            err.add(key, f"expected a number, got {_show(value)} ({_type_word(value)})")
            return _BAD
        value = float(value)
        if not math.isfinite(value):
            err.add(key, f"must be a finite number, got {_show(value)}")
            return _BAD
    elif tp is str:
        if not isinstance(value, str):
            err.add(key, f"expected a string, got {_show(value)} ({_type_word(value)}); "
                         f"quote it if it is meant as text")
            return _BAD
        if not value.strip():
            err.add(key, "must not be empty (use null to leave it unset)")
            return _BAD
        value = meta["value_aliases"].get(value, value)
        choices = meta["choices"]
        if choices and value not in choices:
            lowered = {c.lower(): c for c in choices}
            close = difflib.get_close_matches(value.lower(), list(lowered), n=1)
            hint = f"; did you mean {lowered[close[0]]!r}?" if close else ""
            err.add(key, f"invalid value {_show(value)}; choose one of: {', '.join(choices)}{hint}")
            return _BAD
        return value
    else:  # pragma: no cover - schema uses only the types above
        raise TypeError(f"unsupported schema type {tp!r} for {key}")
    ge, gt, le, lt = meta["ge"], meta["gt"], meta["le"], meta["lt"]
    if ((ge is not None and value < ge) or (gt is not None and value <= gt)
            or (le is not None and value > le) or (lt is not None and value >= lt)):
        err.add(key, f"must be {_range_text(meta)}, got {_show(value)}")
        return _BAD
    return value


def _range_text(meta: dict) -> str:
    lo = ("ge", meta["ge"]) if meta["ge"] is not None else ("gt", meta["gt"])
    hi = ("le", meta["le"]) if meta["le"] is not None else ("lt", meta["lt"])
    if lo[1] is not None and hi[1] is not None:
        return (f"in {'[' if lo[0] == 'ge' else '('}{_fmt_num(lo[1])}, "
                f"{_fmt_num(hi[1])}{']' if hi[0] == 'le' else ')'}")
    if lo[1] is not None:
        return f"{'>=' if lo[0] == 'ge' else '>'} {_fmt_num(lo[1])}"
    return f"{'<=' if hi[0] == 'le' else '<'} {_fmt_num(hi[1])}"


def _coerce(value: Any, tp: Any, meta: dict, key: str, err: _Errors) -> Any:
    tp, optional = _strip_optional(tp)
    if value is None and dataclasses.is_dataclass(tp):
        value = {}  # an empty section (`eval:`) means all defaults
    if value is None:
        if optional:
            return None
        err.add(key, "must not be null")
        return _BAD
    if dataclasses.is_dataclass(tp):
        return _walk(tp, value, key, err)
    if typing.get_origin(tp) is list:
        (item_tp,) = typing.get_args(tp)
        if not isinstance(value, list):
            err.add(key, f"expected a list such as [a, b], got {_show(value)} "
                         f"({_type_word(value)})")
            return _BAD
        items = [_check_scalar(v, item_tp, meta, f"{key}[{i}]", err) for i, v in enumerate(value)]
        return _BAD if any(v is _BAD for v in items) else items
    return _check_scalar(value, tp, meta, key, err)


def _walk(cls: type, raw: Any, prefix: str, err: _Errors) -> Any:
    """Build dataclass ``cls`` from mapping ``raw``, reporting every problem under ``prefix``."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        err.add(prefix or "<top level>", f"expected a mapping of keys, got {_show(raw)} "
                                         f"({_type_word(raw)})")
        return _BAD
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    bad = False
    for key in raw:
        if not isinstance(key, str) or key not in fields:
            bad = True
            dotted = f"{prefix}.{key}" if prefix else str(key)
            if not prefix:
                hint = _SECTION_HINTS.get(key, "")
                hint = f"; {hint}" if hint else _suggest(str(key), None)
                err.add(dotted, f"unknown section{hint} (sections: {', '.join(SECTIONS)})")
            else:
                err.add(dotted, f"unknown key{_suggest(str(key), prefix)}")
    kwargs = {}
    for name, f in fields.items():
        dotted = f"{prefix}.{name}" if prefix else name
        tp = hints[name]
        if name in raw:
            value = _coerce(raw[name], tp, f.metadata, dotted, err)
        elif dataclasses.is_dataclass(tp):
            value = _walk(tp, {}, dotted, err)  # absent section: defaults / missing required keys
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            err.add(dotted, "missing required key")
            value = _BAD
        else:
            continue
        if value is _BAD:
            bad = True
        kwargs[name] = value
    return _BAD if bad else cls(**kwargs)


# --------------------------------------------------------------------------------------------
# derived defaults and cross-key rules

_REPO_ROOT = Path(__file__).resolve().parents[2]


# GSPO's clip range (Zheng et al. 2025, sec. 5.1): the sequence-level ratio moves far less than a token's
_GSPO_CLIP = (3e-4, 4e-4)


def _resolve_defaults(cfg: TrainConfig, explicit: set[str], name: str) -> None:
    rl = cfg.rl_config
    if rl.mini_batch_size is None:
        rl.mini_batch_size = rl.global_batch_size * rl.n_samples_per_prompt
    gspo = rl.policy_loss == "gspo" and "rl_config.clip_ratio" not in explicit
    if rl.clip_ratio_low is None:
        rl.clip_ratio_low = _GSPO_CLIP[0] if gspo else rl.clip_ratio
    if rl.clip_ratio_high is None:
        rl.clip_ratio_high = _GSPO_CLIP[1] if gspo else rl.clip_ratio
    if rl.policy_loss == "gspo" and "rl_config.loss_agg_mode" not in explicit:
        rl.loss_agg_mode = "seq-mean-token-mean"
    if rl.adv_estimator == "dr_grpo" and "rl_config.norm_adv_by_std" not in explicit:
        rl.norm_adv_by_std = False
    # `use_kl_in_loss: false` is mindrl's older spelling of "KL as a reward penalty"
    if ("rl_config.use_kl_in_loss" in explicit and rl.use_kl_in_loss is False
            and "rl_config.use_kl_in_reward" not in explicit):
        rl.use_kl_in_reward = True
    if rl.use_kl_in_loss is None:
        rl.use_kl_in_loss = not rl.use_kl_in_reward
    if cfg.data.seed is None:
        cfg.data.seed = cfg.runtime.seed
    if cfg.eval.max_tokens is None:
        cfg.eval.max_tokens = cfg.generate_config.max_tokens
    if cfg.logging.name is None:
        cfg.logging.name = name
    cfg.logging.log_dir = cfg.logging.log_dir.replace("<name>", cfg.logging.name)


def _default(key: str):
    section, name = key.split(".")
    f = _section_fields(section)[name]
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()


def _check_rules(cfg: TrainConfig, explicit: set[str], err: _Errors) -> None:
    from mindrl.algorithms import get_advantage_estimator
    rl, actor, gen = cfg.rl_config, cfg.actor_config, cfg.generate_config
    values = {f"{s}.{k}": v for s, sec in cfg.to_dict().items() for k, v in sec.items()}

    def inert(key: str, why: str, switch: str | None = None) -> None:
        """A key the run would not act on: refused when the user set it to something other than its default,
        unless the user also set the ``switch`` that turns it off (then they know, e.g. a DAPO yaml run with
        ``rl_config.dynamic_sampling=false`` keeps its max_num_gen_batches)."""
        if key in explicit and values[key] != _default(key) and switch not in explicit:
            err.add(key, f"{_show(values[key])} has no effect: {why}; remove it")

    est = get_advantage_estimator(rl.adv_estimator)
    if est.needs_groups and rl.n_samples_per_prompt < 2:
        err.add("rl_config.n_samples_per_prompt",
                f"must be >= 2 for adv_estimator {rl.adv_estimator!r} (the group baseline needs "
                f"more than one response per prompt), got {rl.n_samples_per_prompt}")
    if est.needs_critic:
        err.add("rl_config.adv_estimator",
                f"{rl.adv_estimator!r} needs a critic (a value model), and this config has no critic_config "
                f"section; add one, or pick an estimator without a critic: grpo, dr_grpo, rloo, "
                f"reinforce_plus_plus, reinforce_plus_plus_baseline")
    users = lambda key: ", ".join(sorted(n for n, e in _estimators().items() if key in e.options))  # noqa: E731
    for key in ("gamma", "lam", "advantage_whiten"):
        if key not in est.options:
            inert(f"rl_config.{key}", f"adv_estimator {rl.adv_estimator!r} does not use it (used by: {users(key)})")
    if rl.adv_estimator not in ("grpo", "dr_grpo"):
        inert("rl_config.norm_adv_by_std", f"only grpo scales advantages by the group std, not "
                                           f"{rl.adv_estimator!r}")
    if rl.dynamic_sampling and not est.needs_groups:
        err.add("rl_config.dynamic_sampling",
                f"drops prompts whose samples all scored the same, which needs groups of samples; "
                f"adv_estimator {rl.adv_estimator!r} has none")

    # KL: in the loss, in the reward, or nowhere
    if rl.use_kl_in_loss and rl.use_kl_in_reward:
        err.add("rl_config.use_kl_in_reward",
                "and rl_config.use_kl_in_loss are both true: the KL would be applied twice; choose one")
    if rl.use_kl_in_reward and rl.kl_coef == 0:
        why = ("rl_config.use_kl_in_loss: false puts the KL into the reward" if "rl_config.use_kl_in_reward"
               not in explicit else "rl_config.use_kl_in_reward is true")
        err.add("rl_config.kl_coef", f"is 0 but {why}; set kl_coef > 0 (alias init_kl_coef), or drop the KL keys")
    if not rl.use_kl_in_loss and not rl.use_kl_in_reward and rl.kl_coef > 0:
        err.add("rl_config.kl_coef", f"{_fmt_num(rl.kl_coef)} but use_kl_in_loss and use_kl_in_reward are both "
                                     f"false: the KL would go nowhere")
    if rl.kl_ctrl_type == "adaptive" and not rl.use_kl_in_reward:
        err.add("rl_config.kl_ctrl_type", "adaptive adjusts the coefficient of a KL reward penalty; it needs "
                                          "rl_config.use_kl_in_reward: true")
    if rl.kl_ctrl_type != "adaptive":
        for key in ("kl_target", "kl_horizon"):
            inert(f"rl_config.{key}", "only the adaptive KL controller reads it (rl_config.kl_ctrl_type: adaptive)",
                  "rl_config.kl_ctrl_type")
    if rl.kl_coef == 0:
        inert("rl_config.kl_penalty", "kl_coef is 0, so there is no KL term; set rl_config.kl_coef",
              "rl_config.kl_coef")

    if rl.policy_loss == "gspo":
        if rl.clip_ratio_c is not None:
            err.add("rl_config.clip_ratio_c", "GSPO clips the sequence ratio and has no dual clip; remove it")
        if rl.loss_agg_mode != "seq-mean-token-mean":
            err.add("rl_config.loss_agg_mode", f"{rl.loss_agg_mode!r}: GSPO's sequence-level objective needs "
                                               f"seq-mean-token-mean (the default with policy_loss gspo)")
    if "rl_config.clip_ratio_low" in explicit and "rl_config.clip_ratio_high" in explicit:
        inert("rl_config.clip_ratio", "clip_ratio_low and clip_ratio_high are both given")

    total = rl.global_batch_size * rl.n_samples_per_prompt
    if total % rl.mini_batch_size:
        err.add("rl_config.mini_batch_size",
                f"{rl.mini_batch_size} does not divide global_batch_size*n_samples_per_prompt = "
                f"{rl.global_batch_size}*{rl.n_samples_per_prompt} = {total}")
    elif rl.mini_batch_size % rl.micro_batch_size:
        err.add("rl_config.micro_batch_size",
                f"{rl.micro_batch_size} does not divide mini_batch_size = {rl.mini_batch_size}")
    if rl.adv_estimator == "dr_grpo" and rl.norm_adv_by_std:
        err.add("rl_config.norm_adv_by_std",
                "must be false with adv_estimator 'dr_grpo' (Dr. GRPO does not scale advantages "
                "by the group std); remove the key or set it to false")
    if not rl.verifier_function:
        err.add("rl_config.verifier_function", "must name at least one verifier, e.g. [acc]")
    dups = sorted({v for v in rl.verifier_function if rl.verifier_function.count(v) > 1})
    if dups:
        err.add("rl_config.verifier_function", f"lists {', '.join(dups)} more than once")
    if len(rl.verifier_weight) != len(rl.verifier_function):
        err.add("rl_config.verifier_weight",
                f"has {len(rl.verifier_weight)} entries but verifier_function has "
                f"{len(rl.verifier_function)} ({_show(rl.verifier_function)}); "
                f"give one weight per verifier")
    if rl.overlong_buffer_len >= gen.max_tokens:
        err.add("rl_config.overlong_buffer_len",
                f"{rl.overlong_buffer_len} must be smaller than generate_config.max_tokens = "
                f"{gen.max_tokens}")
    if rl.overlong_buffer_len == 0:
        inert("rl_config.overlong_penalty_factor", "the overlong penalty is off (rl_config.overlong_buffer_len: 0)",
              "rl_config.overlong_buffer_len")
    if not rl.dynamic_sampling:
        inert("rl_config.max_num_gen_batches", "dynamic sampling is off (rl_config.dynamic_sampling: false)",
              "rl_config.dynamic_sampling")

    if actor.min_lr > actor.lr:
        err.add("actor_config.min_lr",
                f"{_fmt_num(actor.min_lr)} is larger than lr = {_fmt_num(actor.lr)}")
    if actor.lr_decay_style == "constant":
        inert("actor_config.min_lr", "lr_decay_style is constant (min_lr is the floor of cosine/linear decay)",
              "actor_config.lr_decay_style")
    if actor.lr_warmup_fraction is not None and actor.lr_warmup_iters > 0:
        err.add("actor_config.lr_warmup_fraction",
                f"cannot be combined with lr_warmup_iters = {actor.lr_warmup_iters}; set only one")
    if actor.lr_warmup_iters > rl.train_iters:
        # legal (a short trial run of a long config), but the lr never reaches actor_config.lr: say so
        import warnings
        warnings.warn(f"actor_config.lr_warmup_iters = {actor.lr_warmup_iters} is longer than "
                      f"rl_config.train_iters = {rl.train_iters}: the learning rate stays in warm-up", stacklevel=2)
    if not actor.finetune and actor.load is None:
        err.add("actor_config.load",
                "is required when finetune is false (resuming needs the checkpoint directory "
                "to restore step, optimizer, rng and data position from)")
    if actor.finetune:
        for key in ("no_load_optim", "no_load_rng"):
            if f"actor_config.{key}" in explicit and values[f"actor_config.{key}"] is False:
                err.add(f"actor_config.{key}", "false has no effect: finetune: true starts a new run and restores "
                                               "no optimizer or RNG state; set finetune: false to resume")
    if not actor.finetune and cfg.ref.ref_model_load_path is None and rl.kl_coef > 0:
        err.add("ref.ref_model_load_path",
                "is required when actor_config.finetune is false and kl_coef > 0: the resumed "
                "checkpoint holds the trained actor, so give the original weights for the "
                "reference model (MindSpeed-RL spelling: "
                "rl_config.integrated_mode_config.ref_model_load_path)")
    if rl.kl_coef == 0:
        for key in ("ref.ref_model_load_path", "ref.model"):
            if key in explicit and values[key] is not None:
                err.add(key, "has no effect: there is no reference model without a KL term (rl_config.kl_coef "
                             "is 0); remove it")
    if actor.save_interval > 0 and actor.save is None:
        err.add("actor_config.save_interval",
                f"is {actor.save_interval} but actor_config.save is not set; give a save directory")
    if actor.save is None:
        inert("actor_config.keep_last", "nothing is saved (actor_config.save is not set)", "actor_config.save")
    if gen.min_tokens > gen.max_tokens:
        err.add("generate_config.min_tokens",
                f"{gen.min_tokens} is larger than max_tokens = {gen.max_tokens}")
    if cfg.eval.path is None:
        for key in ("interval", "num_samples", "max_tokens"):
            inert(f"eval.{key}", "there is no evaluation without eval.path", "eval.path")
    if not cfg.runtime.enable_compile_cache:
        inert("runtime.compile_cache_path", "runtime.enable_compile_cache is false", "runtime.enable_compile_cache")
    if not cfg.runtime.only_save_strategy:
        inert("runtime.strategy_dir", "strategy files go there only with runtime.only_save_strategy (or `mindrl "
                                      "export-strategy`); checkpoints carry their own", "runtime.only_save_strategy")


def _estimators():
    from mindrl.algorithms import ADVANTAGE_ESTIMATORS
    return ADVANTAGE_ESTIMATORS


def _where(path: str) -> str:
    if os.path.isabs(os.path.expanduser(path)):
        return ""
    return f" (relative paths are resolved against {os.getcwd()})"


def _check_paths(cfg: TrainConfig, err: _Errors) -> None:
    """Check the files the run needs; expand ``~``; resolve bare model names."""
    actor, ref, rl = cfg.actor_config, cfg.ref, cfg.rl_config

    def exists(key: str, written: str, what: str) -> str | None:
        path = os.path.expanduser(written)
        if not os.path.exists(path):
            err.add(key, f"{what} not found: {written!r}{_where(written)}")
            return None
        return path

    def model(key: str, written: str) -> str:
        path = os.path.expanduser(written)
        bare = ("/" not in written and os.sep not in written
                and not written.endswith((".yaml", ".yml", ".json")))
        if bare and not os.path.exists(path):
            for root in (Path.cwd(), _REPO_ROOT):
                candidate = root / "model_configs" / f"{written}.yaml"
                if candidate.is_file():
                    return str(candidate.relative_to(root) if root == Path.cwd() else candidate)
            err.add(key, f"model config not found: {written!r} (no such path, and no "
                         f"model_configs/{written}.yaml in {Path.cwd()} or {_REPO_ROOT})")
            return written
        if not os.path.exists(path):
            err.add(key, f"model config not found: {written!r}{_where(written)}")
        elif os.path.isdir(path):
            if not os.path.isfile(os.path.join(path, "config.json")):
                err.add(key, f"directory {written!r} has no config.json (expected a HuggingFace "
                             f"checkpoint directory or a model yaml)")
        elif not path.endswith((".yaml", ".yml", ".json")):
            err.add(key, f"expected a model yaml, a config.json or a HuggingFace directory, "
                         f"got {written!r}")
        return path

    def mindrecord(key: str, written: str, allow_jsonl: bool) -> str:
        path = os.path.expanduser(written)
        suffix = os.path.splitext(path)[1]
        if suffix in (".json", ".jsonl", ".parquet") and not (allow_jsonl and suffix == ".jsonl"):
            err.add(key, f"expected a .mindrecord file{' or .jsonl' if allow_jsonl else ''}, got "
                         f"{written!r}; convert it with `mindrl preprocess`")
            return path
        if exists(key, written, "dataset") is None:
            return path
        if os.path.isdir(path):
            err.add(key, f"expected a .mindrecord file, got directory {written!r}")
        elif ".mindrecord" in suffix and not os.path.exists(path + ".db"):
            err.add(key, f"index file {written + '.db'!r} is missing (copy it together with the "
                         f"data file)")
        return path

    actor.model = model("actor_config.model", actor.model)
    if ref.model is not None:
        ref.model = model("ref.model", ref.model)

    tok = exists("actor_config.tokenizer_name_or_path", actor.tokenizer_name_or_path, "tokenizer")
    if tok is not None:
        actor.tokenizer_name_or_path = tok
        from mindrl.data.tokenizer import VOCABULARY_FILES, has_tokenizer
        if os.path.isdir(tok) and not has_tokenizer(tok):
            err.add("actor_config.tokenizer_name_or_path",
                    f"directory {tok!r} contains none of {', '.join(VOCABULARY_FILES)}")

    if actor.load is not None:
        load = exists("actor_config.load", actor.load, "checkpoint")
        if load is not None:
            if os.path.isfile(load) and not load.endswith((".ckpt", ".safetensors")):
                err.add("actor_config.load",
                        f"expected a directory, .ckpt or .safetensors, got {actor.load!r}")
            elif not actor.finetune and not os.path.isdir(load):
                err.add("actor_config.load",
                        f"finetune is false, so {actor.load!r} must be a mindrl checkpoint "
                        f"directory to resume from, not a file")
            actor.load = load
    if actor.save is not None:
        actor.save = os.path.expanduser(actor.save)
        if os.path.exists(actor.save) and not os.path.isdir(actor.save):
            err.add("actor_config.save", f"{actor.save!r} exists and is not a directory")

    if ref.ref_model_load_path is not None:
        found = exists("ref.ref_model_load_path", ref.ref_model_load_path, "reference weights")
        ref.ref_model_load_path = found or ref.ref_model_load_path

    if rl.custom_reward_file is not None:
        # forms the reward loader accepts: file.py, file.py:func, package.module:func
        target, _, func = rl.custom_reward_file.partition(":")
        if target.endswith(".py"):
            found = exists("rl_config.custom_reward_file", target, "reward file")
            if found is not None:
                if not os.path.isfile(found):
                    err.add("rl_config.custom_reward_file", f"expected a .py file, got {rl.custom_reward_file!r}")
                rl.custom_reward_file = found + (f":{func}" if func else "")
        elif not func:
            err.add("rl_config.custom_reward_file",
                    f"expected file.py, file.py:function or package.module:function, got {rl.custom_reward_file!r}")

    cfg.data.path = mindrecord("data.path", cfg.data.path, allow_jsonl=False)
    if cfg.eval.path is not None:
        cfg.eval.path = mindrecord("eval.path", cfg.eval.path, allow_jsonl=True)
    for obj, name in ((cfg.logging, "log_dir"), (cfg.runtime, "compile_cache_path"),
                      (cfg.runtime, "strategy_dir")):
        setattr(obj, name, os.path.expanduser(getattr(obj, name)))


# --------------------------------------------------------------------------------------------
# public entry points

def config_from_dict(data: dict, overrides: Iterable[str] = (), *, source: str = "<dict>",
                     name: str = "run", check_paths: bool = True) -> TrainConfig:
    """Validate an already-parsed config mapping (``data`` is not modified).

    ``source`` prefixes error messages; ``name`` is the default ``logging.name``;
    ``check_paths=False`` skips every filesystem check (for unit tests of other modules).
    """
    err = _Errors(source)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of sections at the top level, got "
                          f"{_show(data)} ({_type_word(data)})")
    raw = copy.deepcopy(data)
    _canonicalize(raw, err)
    _apply_overrides(raw, overrides, err)
    cfg = _walk(TrainConfig, raw, "", err)
    err.raise_if_any()
    assert isinstance(cfg, TrainConfig)
    explicit = {f"{s}.{k}" for s, sec in raw.items() if isinstance(sec, dict) for k in sec}

    _resolve_defaults(cfg, explicit, name)
    _check_rules(cfg, explicit, err)
    if check_paths:
        _check_paths(cfg, err)
    err.raise_if_any()

    if cfg.ref.model is None:
        cfg.ref.model = cfg.actor_config.model
    if cfg.ref.ref_model_load_path is None:
        cfg.ref.ref_model_load_path = cfg.actor_config.load
    return cfg


def load_train_config(path: str | os.PathLike, overrides: Iterable[str] = (), *,
                      check_paths: bool = True) -> TrainConfig:
    """Load ``path``, apply ``section.key=value`` overrides, resolve defaults and validate.

    Raises :class:`ConfigError` naming the file and the dotted key of every problem.
    """
    source = os.fspath(path)
    try:
        with open(os.path.expanduser(source), encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise ConfigError(f"{source}: config file not found{_where(source)}") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{source}: cannot read config file: {exc}") from None
    return config_from_dict(parse_yaml(text, source), overrides, source=source,
                            name=Path(source).stem, check_paths=check_paths)
