"""Load, override, resolve and validate a config: the engine every kind of mindrl config goes through.

A kind (:class:`ConfigKind`) names its root dataclass, aliases and rules: ``mindrl/config/train.py`` for
``mindrl train``, ``mindrl/config/reward_training.py`` for ``mindrl train-rm``.

Pipeline (all before anything touches mindspore):

1. parse the yaml with a strict loader (YAML 1.2 booleans, ``1e-5`` is a float, duplicate keys
   are errors);
2. move alias spellings (MindSpeed-RL / MindRLHF habits) onto their canonical keys, and take out other
   frameworks' keys mindrl does not read (accepted with the value that says what mindrl does, else refused with
   the reason), whether the file or a command-line override gives them;
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
import types
import typing
from pathlib import Path
from typing import Any, Iterable, Union

import yaml

from mindrl.config.errors import ConfigError
from mindrl.config.yaml_io import _Loader, parse_yaml

# --------------------------------------------------------------------------------------------
# aliases

_MISSING_SECTION = object()


# --------------------------------------------------------------------------------------------
# error collection

class Errors:
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

def check_optimizer(opt, section: str, explicit: set, err: "Errors") -> None:
    """The learning-rate schedule of a trained network's section (an OptimizerConfig): the rules every command
    that trains (train, train-rm, sft) applies the same way."""
    if opt.min_lr > opt.lr:
        err.add(f"{section}.min_lr", f"{_fmt_num(opt.min_lr)} is larger than lr = {_fmt_num(opt.lr)}")
    if (opt.lr_decay_style == "constant" and f"{section}.min_lr" in explicit and opt.min_lr != 0.0
            and f"{section}.lr_decay_style" not in explicit):
        err.add(f"{section}.min_lr", f"{_show(opt.min_lr)} has no effect: lr_decay_style is constant (min_lr is the "
                                     f"floor of cosine/linear decay); remove it")
    if opt.lr_warmup_fraction is not None and opt.lr_warmup_iters > 0:
        err.add(f"{section}.lr_warmup_fraction",
                f"cannot be combined with lr_warmup_iters = {opt.lr_warmup_iters}; set only one")


def check_lora(sec, section: str, explicit: set, err: "Errors") -> None:
    """A trained network's LoRA keys (config/schema.py LoraConfig): known projections, no dropout; with lora_rank 0
    the other keys, even at their defaults, are refused unless lora_rank itself was written (a file that turns LoRA
    off keeps them)."""
    from mindrl.models.lora import target_projections
    if not sec.lora_rank:
        for key in ("lora_alpha", "lora_dropout", "lora_target_modules"):
            if f"{section}.{key}" in explicit and f"{section}.lora_rank" not in explicit:
                err.add(f"{section}.{key}", f"{_show(getattr(sec, key))} has no effect: {section}.lora_rank is 0 "
                                            f"(full fine-tuning, no adapters); remove it")
        return
    if sec.lora_dropout:
        err.add(f"{section}.lora_dropout", f"{sec.lora_dropout} is not supported, only 0: dropout would make the "
                "update's log-probs differ from the rollout's at equal weights (the clipped ratio is no longer 1 on "
                "the first pass), and on CPU its noise cannot be seeded, so a resume would not repeat the run")
    try:
        target_projections(sec.lora_target_modules)
    except ValueError as e:
        err.add(f"{section}.lora_target_modules", str(e))


def check_recompute(sec, section: str, err: "Errors") -> None:
    """A trained network's recompute keys (config/schema.py RecomputeConfig), by Megatron's own rules (its
    TransformerConfig): full needs a method and a layer count, and the method and count mean nothing without it.
    The count's upper bound, the model's num_layers, is checked with the model (recompute_beyond)."""
    g, method, n = sec.recompute_granularity, sec.recompute_method, sec.recompute_num_layers
    if g is None:
        for key, value in (("recompute_method", method), ("recompute_num_layers", n)):
            if value is not None:
                err.add(f"{section}.{key}", f"{_show(value)} has no effect: {section}.recompute_granularity is not "
                                            f"set (give full to recompute whole layers)")
    elif g == "selective":
        err.add(f"{section}.recompute_granularity", "selective is not supported: Megatron's selective recomputes the "
                "core attention only, mindrl recomputes whole decoder layers; use full with recompute_method and "
                "recompute_num_layers")
    else:
        if method is None:
            err.add(f"{section}.recompute_method", "is required with recompute_granularity full (as in Megatron): "
                                                   "block (the first recompute_num_layers layers) or uniform (all)")
        if n is None:
            err.add(f"{section}.recompute_num_layers", "is required with recompute_granularity full (as in "
                                                       "Megatron): a layer count from 1 to the model's num_layers")


def recompute_beyond(sec, layers: int):
    """Why ``sec.recompute_num_layers`` does not fit a model of ``layers`` layers, or None when it does."""
    n = sec.recompute_num_layers
    if sec.recompute_granularity == "full" and n is not None and n > layers:
        return f"{n} is more than the {layers} layers of the model {sec.model!r}"
    return None


class ConfigKind:
    """One kind of config file: its root dataclass (whose fields are the sections), the alias spellings it
    accepts, hints for sections of other frameworks, and its own rules.

    ``resolve(cfg, explicit, name)`` fills derived defaults, ``rules(cfg, explicit, err)`` checks keys that
    depend on each other, ``paths(cfg, err)`` checks the files the run needs, ``finish(cfg)`` fills what depends
    on checked paths. ``explicit`` is the set of dotted keys the file or an override gave.
    """

    def __init__(self, root: type, aliases: dict, section_hints: dict, resolve, rules, paths, finish=None,
                 peer=None, retired=None):
        self.root, self.aliases, self.section_hints = root, dict(aliases), dict(section_hints)
        self.retired = dict(retired or {})  # dotted key of an earlier version -> what replaced it
        # another framework's vocabulary read with its meaning (mindrl.config.mindspeed_rl): a module with
        # is_peer_key(dotted), is_mindspeed_file(raw), translate(raw, source, overridden) and
        # translate_native(raw, source, schema_keys, overridden), each returning a Translation
        self.peer = peer
        self.resolve, self.rules, self.paths, self.finish = resolve, rules, paths, finish
        self.sections = tuple(f.name for f in dataclasses.fields(root))
        # mappings that exist only to hold aliases, e.g. rl_config.integrated_mode_config
        self.alias_containers: dict[str, list[str]] = {}
        for alias in self.aliases:
            parts = alias.split(".")
            if len(parts) == 3:
                self.alias_containers.setdefault(".".join(parts[:2]), []).append(parts[2])

    def section_class(self, section: str) -> type:
        return _strip_optional(typing.get_type_hints(self.root)[section])[0]

    def fields(self, section: str) -> dict[str, dataclasses.Field]:
        return {f.name: f for f in dataclasses.fields(self.section_class(section))}

    def all_keys(self) -> list[str]:
        keys = [f"{s}.{k}" for s in self.sections for k in self.fields(s)]
        return keys + list(self.aliases)

    def field_type(self, section: str, key: str) -> Any:
        return typing.get_type_hints(self.section_class(section))[key]

    def default(self, key: str) -> Any:
        section, name = key.split(".")
        f = self.fields(section)[name]
        return f.default if f.default is not dataclasses.MISSING else f.default_factory()


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0], len(args) < len(typing.get_args(tp))
    return tp, False


def _suggest(kind: ConfigKind, key: str, section: str | None) -> str:
    """' did you mean ...?' for an unknown key (in ``section``, or top level when None)."""
    if section is None:
        tops = list(kind.sections) + [a for a in kind.aliases if "." not in a]
        close = difflib.get_close_matches(key, tops, n=1)
        return f"; did you mean {close[0]!r}?" if close else ""
    elsewhere = [s for s in kind.sections if s != section and key in kind.fields(s)]
    if elsewhere:
        return f"; did you mean '{elsewhere[0]}.{key}'?"
    names = list(kind.fields(section))
    names += [a.split(".", 1)[1] for a in kind.aliases if a.startswith(section + ".")]
    close = difflib.get_close_matches(key, names, n=1)
    if close:
        return f"; did you mean '{section}.{close[0]}'?"
    leaves = {k.rsplit(".", 1)[1]: k for k in reversed(kind.all_keys()) if "." in k}
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


def _peer_overrides(kind: ConfigKind, raw: dict, overrides: Iterable[str], err: Errors) -> tuple:
    """Apply the ``key=value`` overrides that name the peer's keys (``megatron_training.global_batch_size=8``,
    ``rl_config.init_kl_coef=0.01``) to the file's own mapping, so they are translated as the file's are; an
    override of a key's alias spelling replaces the canonical key the file gave. Returns (the other overrides,
    peer key -> override text)."""
    rest, overridden = [], {}
    # in a peer's own file every key of its vocabulary is the peer's (translated with its defaults and rules); in a
    # mindrl file a key mindrl's schema has is mindrl's
    peer_file = kind.peer is not None and kind.peer.is_mindspeed_file(raw)
    for text in overrides:
        key, sep, value_text = text.partition("=")
        key = key.strip()
        if kind.peer is None or not sep or not kind.peer.is_peer_key(key) or (
                _is_schema_key(kind, key) and not peer_file):
            rest.append(text)
            continue
        try:
            value = yaml.load(value_text, Loader=_Loader)  # noqa: S506
        except yaml.YAMLError as exc:
            err.add(key, f"cannot parse value {value_text!r} of command-line override: {' '.join(str(exc).split())}")
            continue
        parts = key.split(".")
        node = raw
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[parts[-1]] = value
        overridden[key] = text
        canonical = kind.peer.canonical_of(key)
        if canonical and canonical != key:  # the override also beats the file's own spelling of the key
            section, name = canonical.split(".")
            if isinstance(raw.get(section), dict):
                raw[section].pop(name, None)
    return rest, overridden


def _is_schema_key(kind: ConfigKind, key: str) -> bool:
    parts = key.split(".")
    return len(parts) == 2 and parts[0] in kind.sections and parts[1] in kind.fields(parts[0])


def _translate(kind: ConfigKind, raw: dict, source: str, overridden: dict, err: Errors):
    """The peer's keys as mindrl's: a whole MindSpeed-RL file with MindSpeed-RL's defaults and meaning, or the
    MindSpeed-RL keys inside a mindrl file. Returns the Translation (None without a peer vocabulary)."""
    if kind.peer is None:
        return None
    if kind.peer.is_mindspeed_file(raw):
        tr = kind.peer.translate(raw, source, overridden)
    else:
        schema_keys = {s: set(kind.fields(s)) for s in kind.sections}
        tr = kind.peer.translate_native(raw, source, schema_keys, overridden)
    for key, message in tr.errors:
        err.add(key, message)
    if tr.out is not raw:
        raw.clear()
        raw.update(tr.out)
    return tr


def _canonicalize(kind: ConfigKind, raw: dict, err: Errors) -> None:
    """Move alias spellings onto their canonical keys, in place."""
    for alias, canonical in kind.aliases.items():
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
    for container, children in kind.alias_containers.items():
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


def _apply_overrides(kind: ConfigKind, raw: dict, overrides: Iterable[str], err: Errors) -> None:
    for text in overrides:
        try:
            key, value_text = parse_override(text)
        except ConfigError as exc:
            err.lines.append(f"{err.source}: {exc}")
            continue
        canonical = kind.aliases.get(key, key)
        parts = canonical.split(".")
        if canonical in kind.retired:
            err.add(canonical, kind.retired[canonical])
            continue
        if len(parts) != 2 or parts[0] not in kind.sections or parts[1] not in kind.fields(parts[0]):
            if len(parts) == 2 and parts[0] in kind.sections:  # a key of another section first (rl_config.lr)
                hint = _suggest(kind, parts[1], parts[0])
            else:
                close = difflib.get_close_matches(key, kind.all_keys(), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
            if len(parts) == 1 and parts[0] in kind.sections:
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
        tp, _ = _strip_optional(kind.field_type(section, name))
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


def _check_scalar(value: Any, tp: Any, meta: dict, key: str, err: Errors) -> Any:
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
        value = meta["value_aliases"].get(value, value)  # e.g. top_k: -1 (vLLM's "off") is mindrl's 0
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


def _coerce(kind: ConfigKind, value: Any, tp: Any, meta: dict, key: str, err: Errors) -> Any:
    tp, optional = _strip_optional(tp)
    if value is None and dataclasses.is_dataclass(tp):
        value = {}  # an empty section (`eval:`) means all defaults
    if value is None:
        if optional:
            return None
        err.add(key, "must not be null")
        return _BAD
    if dataclasses.is_dataclass(tp):
        return _walk(kind, tp, value, key, err)
    if typing.get_origin(tp) is list:
        (item_tp,) = typing.get_args(tp)
        if not isinstance(value, list):
            err.add(key, f"expected a list such as [a, b], got {_show(value)} "
                         f"({_type_word(value)})")
            return _BAD
        items = [_check_scalar(v, item_tp, meta, f"{key}[{i}]", err) for i, v in enumerate(value)]
        return _BAD if any(v is _BAD for v in items) else items
    return _check_scalar(value, tp, meta, key, err)


def _walk(kind: ConfigKind, cls: type, raw: Any, prefix: str, err: Errors) -> Any:
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
                hint = kind.section_hints.get(key, "")
                hint = f"; {hint}" if hint else _suggest(kind, str(key), None)
                err.add(dotted, f"unknown section{hint} (sections: {', '.join(kind.sections)})")
            elif dotted in kind.retired:
                err.add(dotted, kind.retired[dotted])
            else:
                err.add(dotted, f"unknown key{_suggest(kind, str(key), prefix)}")
    kwargs = {}
    for name, f in fields.items():
        dotted = f"{prefix}.{name}" if prefix else name
        tp = hints[name]
        if name in raw:
            value = _coerce(kind, raw[name], tp, f.metadata, dotted, err)
        elif dataclasses.is_dataclass(tp):
            value = _walk(kind, tp, {}, dotted, err)  # absent section: defaults / missing required keys
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
# checks on paths, shared by the config kinds

REPO_ROOT = Path(__file__).resolve().parents[2]


def where(path: str) -> str:
    if os.path.isabs(os.path.expanduser(path)):
        return ""
    return f" (relative paths are resolved against {os.getcwd()})"


class PathChecks:
    """Existence and shape checks of the files a config names; each failure becomes a line in ``err``."""

    def __init__(self, err: Errors):
        self.err = err

    def exists(self, key: str, written: str, what: str) -> str | None:
        path = os.path.expanduser(written)
        if not os.path.exists(path):
            self.err.add(key, f"{what} not found: {written!r}{where(written)}")
            return None
        return path

    def gguf(self, key: str, written: str) -> bool:
        """A .gguf where an HF model is needed: one line with the command that converts it."""
        from mindrl.models.config import gguf_hint
        if str(written).endswith(".gguf"):
            self.err.add(key, f"{written!r} {gguf_hint(written)}")
            return True
        return False

    def recompute(self, section: str, sec) -> None:
        """``sec.recompute_num_layers`` fits the model ``sec.model`` (Megatron: 1 to num_layers per stage). An
        offline kind's check; `mindrl train` checks it in preflight, where its models are read anyway."""
        if sec.recompute_num_layers is None:
            return
        from mindrl.models.config import load_model_config
        try:
            layers = load_model_config(sec.model).num_layers
        except (ValueError, OSError):
            return  # the model's own line says what is wrong with it
        why = recompute_beyond(sec, layers)
        if why:
            self.err.add(f"{section}.recompute_num_layers", why)

    def model(self, key: str, written: str) -> str:
        """A model yaml (a bare name is looked up in model_configs/), a config.json or an HF directory."""
        err = self.err
        if self.gguf(key, written):
            return written
        path = os.path.expanduser(written)
        bare = ("/" not in written and os.sep not in written
                and not written.endswith((".yaml", ".yml", ".json")))
        if bare and not os.path.exists(path):
            for root in (Path.cwd(), REPO_ROOT):
                candidate = root / "model_configs" / f"{written}.yaml"
                if candidate.is_file():
                    return str(candidate.relative_to(root) if root == Path.cwd() else candidate)
            err.add(key, f"model config not found: {written!r} (no such path, and no "
                         f"model_configs/{written}.yaml in {Path.cwd()} or {REPO_ROOT})")
            return written
        if not os.path.exists(path):
            err.add(key, f"model config not found: {written!r}{where(written)}")
        elif os.path.isdir(path):
            if not os.path.isfile(os.path.join(path, "config.json")):
                err.add(key, f"directory {written!r} has no config.json (expected a HuggingFace "
                             f"checkpoint directory or a model yaml)")
        elif not path.endswith((".yaml", ".yml", ".json")):
            err.add(key, f"expected a model yaml, a config.json or a HuggingFace directory, "
                         f"got {written!r}")
        return path

    def mindrecord(self, key: str, written: str, allow_jsonl: bool) -> str:
        err = self.err
        path = os.path.expanduser(written)
        suffix = os.path.splitext(path)[1]
        if suffix in (".json", ".jsonl", ".parquet") and not (allow_jsonl and suffix == ".jsonl"):
            err.add(key, f"expected a .mindrecord file{' or .jsonl' if allow_jsonl else ''}, got "
                         f"{written!r}; convert it with `mindrl preprocess`")
            return path
        if self.exists(key, written, "dataset") is None:
            return path
        if os.path.isdir(path):
            err.add(key, f"expected a .mindrecord file, got directory {written!r}")
        elif ".mindrecord" in suffix and not os.path.exists(path + ".db"):
            err.add(key, f"index file {written + '.db'!r} is missing (copy it together with the "
                         f"data file)")
        return path

    def tokenizer(self, key: str, written: str) -> str:
        tok = self.exists(key, written, "tokenizer")
        if tok is None:
            return written
        from mindrl.data.tokenizer import VOCABULARY_FILES, has_tokenizer
        if os.path.isdir(tok) and not has_tokenizer(tok):
            self.err.add(key, f"directory {tok!r} contains none of {', '.join(VOCABULARY_FILES)}")
        return tok

    def weights(self, key: str, written: str) -> str:
        """Initial weights: an HF directory, a mindrl checkpoint, or a .ckpt / .safetensors file."""
        if self.gguf(key, written):
            return written
        load = self.exists(key, written, "checkpoint")
        if load is None:
            return written
        if os.path.isfile(load) and not load.endswith((".ckpt", ".safetensors")):
            self.err.add(key, f"expected a directory, .ckpt or .safetensors, got {written!r}")
        return load

    def output_dir(self, key: str, written: str) -> str:
        path = os.path.expanduser(written)
        if os.path.exists(path) and not os.path.isdir(path):
            self.err.add(key, f"{written!r} exists and is not a directory")
        return path


# --------------------------------------------------------------------------------------------
# public entry points

def config_from_dict(data: dict, overrides: Iterable[str] = (), *, kind: ConfigKind, source: str = "<dict>",
                     name: str = "run", check_paths: bool = True):
    """Validate an already-parsed config mapping (``data`` is not modified).

    ``source`` prefixes error messages; ``name`` is the default ``logging.name``;
    ``check_paths=False`` skips every filesystem check (for unit tests of other modules);
    ``kind`` is the kind of config (:data:`mindrl.config.train.TRAIN`, :data:`mindrl.config.reward_training.
    REWARD_TRAINING`); the engine knows no kind by itself.
    """
    err = Errors(source)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of sections at the top level, got "
                          f"{_show(data)} ({_type_word(data)})")
    raw = copy.deepcopy(data)
    overrides, overridden = _peer_overrides(kind, raw, overrides, err)
    tr = _translate(kind, raw, source, overridden, err)
    _canonicalize(kind, raw, err)
    _apply_overrides(kind, raw, overrides, err)
    cfg = _walk(kind, kind.root, raw, "", err)
    err.raise_if_any()
    assert isinstance(cfg, kind.root)
    given = {f"{s}.{k}" for s, sec in raw.items() if isinstance(sec, dict) for k in sec}
    # a peer's default the file relied on is not a key the user gave (the "has no effect" rules judge given keys)
    explicit = given - ((tr.defaulted if tr else set()) - set(err.origin))
    origins = dict(tr.origins) if tr else {}
    origins.update({k: f"command line {t!r}" for k, t in err.origin.items()})
    for key in explicit:
        origins.setdefault(key, source)

    cfg.meta.source, cfg.meta.raw, cfg.meta.explicit = source, raw, frozenset(explicit)
    cfg.meta.origins, cfg.meta.notes = origins, list(tr.notes) if tr else []
    cfg.meta.peer_file = bool(kind.peer and kind.peer.is_mindspeed_file(data))
    kind.resolve(cfg, explicit, name)
    kind.rules(cfg, explicit, err)
    if check_paths:
        kind.paths(cfg, err)
    for key, check in (tr.checks if tr else ()):  # the peer's keys mindrl checks against the run (see Translation)
        problem = check(cfg)
        if problem:
            err.add(key, problem)
    err.raise_if_any()
    if kind.finish is not None:
        kind.finish(cfg)
    return cfg


def raw_config(config, overrides: Iterable[str] = (), *, kind: ConfigKind) -> dict:
    """The mapping a yaml path (or a dict) gives after alias spellings and ``key=value`` overrides, before any
    default or check: what the user wrote. Raises ConfigError for unreadable files and bad overrides only."""
    source = "<dict>" if isinstance(config, dict) else os.fspath(config)
    if not isinstance(config, dict):
        try:
            with open(os.path.expanduser(source), encoding="utf-8") as fh:
                config = parse_yaml(fh.read(), source)
        except OSError as exc:
            raise ConfigError(f"{source}: cannot read config file: {exc}") from None
    raw = copy.deepcopy(config or {})
    err = Errors(source)
    overrides, overridden = _peer_overrides(kind, raw, overrides, err)
    _translate(kind, raw, source, overridden, err)
    _canonicalize(kind, raw, err)
    _apply_overrides(kind, raw, overrides, err)
    err.raise_if_any()
    return raw


def load_config(path: str | os.PathLike, overrides: Iterable[str] = (), *, kind: ConfigKind,
                check_paths: bool = True):
    """Load ``path``, apply ``section.key=value`` overrides, resolve defaults and validate.

    Raises :class:`ConfigError` naming the file and the dotted key of every problem.
    """
    source = os.fspath(path)
    try:
        with open(os.path.expanduser(source), encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise ConfigError(f"{source}: config file not found{where(source)}") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{source}: cannot read config file: {exc}") from None
    return config_from_dict(parse_yaml(text, source), overrides, source=source,
                            name=Path(source).stem, check_paths=check_paths, kind=kind)

