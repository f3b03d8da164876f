"""Typed YAML: reading a mapping strictly, ``key=value`` overrides, and checking a nested dict into (nested) frozen
dataclasses by their type annotations. Every error is one :class:`ConfigError` line naming the file or the dotted
key (``train.lr: must be a number, got 'fast'``). :mod:`defect_detector.core.config` defines the dataclasses."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

import yaml


class ConfigError(ValueError):
    """A config key or value is invalid; the message names the key."""


def plain(value: Any) -> Any:
    """``value`` with tuples as lists, recursively (what YAML writes)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def _bool(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{key}: must be true or false, got {value!r}")
    return value


def _int(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key}: must be an integer, got {value!r}")
    return value


def _float(value: Any, key: str) -> float:
    if isinstance(value, str):  # YAML 1.1 reads "1e-3" (no dot) as a string
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{key}: must be a number, got {value!r}")
    return float(value)


def _str(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{key}: must be a string, got {value!r}")
    return value


_SCALARS: dict[Any, Callable[[Any, str], Any]] = {bool: _bool, int: _int, float: _float, str: _str}


def _tuple(value: Any, args: tuple[Any, ...], key: str) -> tuple[Any, ...]:
    """``tuple[X, ...]`` (any length) or ``tuple[X, Y, ...]`` (fixed length) from a YAML list."""
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{key}: must be a list, got {value!r}")
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(coerce(v, args[0], f"{key}[{i}]") for i, v in enumerate(value))
    if len(value) != len(args):
        raise ConfigError(f"{key}: must have {len(args)} items, got {value!r}")
    return tuple(coerce(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args)))


def coerce(value: Any, hint: Any, key: str) -> Any:
    """Convert a YAML value to the annotated type ``hint`` (a dataclass, a tuple, an optional, or bool, int, float,
    str), or raise :class:`ConfigError` naming ``key``."""
    args = get_args(hint)
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: must be a mapping, got {value!r}")
        return build(hint, value, key + ".")
    if get_origin(hint) is tuple:
        return _tuple(value, args, key)
    if args and type(None) in args:
        return None if value is None else coerce(value, next(a for a in args if a is not type(None)), key)
    if hint in _SCALARS:
        return _SCALARS[hint](value, key)
    raise ConfigError(f"{key}: unsupported type {hint!r}")


def build(cls: type, raw: dict[str, Any], prefix: str = "") -> Any:
    """The dataclass ``cls`` from ``raw``, each value checked by :func:`coerce`; an unknown key is an error naming
    the known ones (missing keys take the dataclass defaults)."""
    hints = get_type_hints(cls)
    known = {f.name for f in fields(cls)}
    for key in raw:
        if key not in known:
            raise ConfigError(f"{prefix}{key}: unknown key (known: {', '.join(sorted(known))})")
    return cls(**{k: coerce(v, hints[k], prefix + k) for k, v in raw.items()})


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Return a copy of ``raw`` with ``a.b=value`` overrides applied (values parsed as YAML). :class:`ConfigError`
    with one line for a malformed override (no ``=``, an empty key part, a value that is not YAML) or a ``raw`` that
    is not a mapping."""
    if not isinstance(raw, dict):
        raise ConfigError(f"config: must be a mapping of sections (data:, train:, ...), got {type(raw).__name__}")
    out = plain(raw)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"{item}: override must look like key=value")
        dotted, text = item.split("=", 1)
        parts = dotted.strip().split(".")
        if not all(part.strip() for part in parts):
            raise ConfigError(f"{item}: override key must be a dotted name such as train.lr")
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{dotted}: {part} is not a section")
        try:
            node[parts[-1]] = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{item}: the value is not valid YAML ({_one_line(exc)})") from exc
    return out


class _DuplicateKeyError(yaml.YAMLError):
    def __init__(self, key: Any, line: int, first: int) -> None:
        super().__init__(f"line {line}: duplicate key {key!r} (first set at line {first}; YAML would keep only the last)")


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key repeated within one mapping (plain YAML keeps the last one silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node.start_mark.line + 1)
            except TypeError:  # an unhashable key: SafeLoader's own error follows
                continue
            if first != key_node.start_mark.line + 1:
                raise _DuplicateKeyError(key, key_node.start_mark.line + 1, first)
        return super().construct_mapping(node, deep)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def read_yaml_mapping(path: str | os.PathLike[str], what: str = "config", allow_empty: bool = False) -> dict[str, Any]:
    """The mapping a YAML file holds; :class:`ConfigError` with one line naming the file for a missing, unreadable,
    malformed or empty file (unless ``allow_empty``: ``{}``), a repeated key, or a top level that is not a mapping."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: {what} file not found")
    try:
        raw = yaml.load(p.read_text(encoding="utf-8"), Loader=_StrictLoader)  # noqa: S506 - a SafeLoader
    except _DuplicateKeyError as exc:
        raise ConfigError(f"{p}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: malformed YAML: {_one_line(exc)}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: cannot read {what} file: {_one_line(exc)}") from exc
    if raw is None:
        if allow_empty:
            return {}
        raise ConfigError(f"{p}: the {what} file is empty (a run needs at least data.train; see configs/default.yaml)")
    if not isinstance(raw, dict):
        raise ConfigError(f"{p}: the {what} must be a mapping of sections (data:, train:, ...), got a {type(raw).__name__}")
    return raw
