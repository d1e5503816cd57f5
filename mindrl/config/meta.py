"""What the loader knows about a config besides its values: where it came from and what the user actually wrote.

Kept beside the values (``cfg.meta``) rather than as attributes patched onto the dataclass, so every reader names
one typed object and a config built by hand simply has an empty one.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class ConfigMeta:
    source: str = "<config>"           # the file (or "<dict>"): error messages and the plan print name it
    raw: Optional[dict] = None         # the mapping as given, after overrides: validated again with a change (API)
    explicit: frozenset = frozenset()  # dotted keys the file or an override gave (to_yaml writes these)
    origins: dict = field(default_factory=dict)   # dotted key -> where its value came from (the plan print)
    notes: list = field(default_factory=list)     # keys accepted although mindrl does nothing with them, and why
    peer_file: bool = False            # read as MindSpeed-RL's file (megatron_training / defaults)
    templates: dict = field(default_factory=dict)  # values as written before expansion (log_dir's <name>)
    files_checked: bool = False        # preflight found the files it names fit (it runs once per config)
    resume_extra: tuple = ()           # overrides the resume line needs besides config.yaml (trainer/run_config.py)


class WithMeta:
    """A config root's ``meta``: created empty on first use, filled by the loader."""

    @property
    def meta(self) -> ConfigMeta:
        meta = self.__dict__.get("_meta")
        if meta is None:
            meta = self.__dict__["_meta"] = ConfigMeta()
        return meta
