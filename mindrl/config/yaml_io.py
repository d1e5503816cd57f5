"""mindrl's yaml flavour: YAML 1.2 booleans, exponent floats (``1e-5`` is a float, as OmegaConf and MindSpeed-RL read
it), duplicate keys refused, and a dumper whose strings read back as strings.

Standard library and PyYAML only (msrun's scheduler process reads configs before ``init()``).
"""
from __future__ import annotations

import re
from typing import Any

import yaml

from mindrl.config.errors import ConfigError

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
