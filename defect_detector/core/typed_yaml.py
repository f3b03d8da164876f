"""Typed YAML: reading a mapping strictly, ``key=value`` overrides, and the pydantic base that checks a nested dict
into frozen models. Every error is one :class:`ConfigError` line naming the file or the dotted key
(``train.lr: must be a number, got 'fast'``); :func:`error_line` turns a pydantic ``ValidationError`` into that line.
:mod:`defect_detector.core.config` defines the models."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, ClassVar, TypeVar, get_args

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict, StrictBool, StrictInt, StrictStr, ValidationError
from pydantic.fields import FieldInfo


class ConfigError(ValueError):
    """A config key or value is invalid; the message names the key."""


def plain(value: Any) -> Any:
    """``value`` with tuples as lists, recursively (what YAML writes)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def _yaml_number(value: Any) -> Any:
    """A string YAML 1.1 read from a number without a dot (``1e-3``) as that number; anything else unchanged."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


Bool = StrictBool
Int = StrictInt
Str = StrictStr
Float = Annotated[float, Strict(), BeforeValidator(_yaml_number)]
"""Field types as YAML writes them: no bool for a number, no number or string for a bool, no float for an integer."""
Share = Annotated[Float, Field(ge=0, le=1)]
NonNegative = Annotated[Float, Field(ge=0)]
AtLeastOne = Annotated[Int, Field(ge=1)]
"""A probability or a fraction; a number >= 0; a count >= 1. Bounds are ``Field(ge=, gt=, le=, lt=)``
(``description``: a hint such as the unit); a value out of them is ``key: must be in [0, 1], got 2.0``."""


class Invalid(ValueError):
    """A value check failed inside a model validator: ``key`` (relative to the model, '' for the model itself) and
    the text after it (``must be > 0, got -1``)."""

    def __init__(self, key: str, text: str) -> None:
        super().__init__(f"{key}: {text}" if key else text)
        self.key, self.text = key, text


def check(ok: bool, key: str, what: str, value: Any) -> None:
    """Raise :class:`Invalid` ``key: what, got value`` unless ``ok``."""
    if not ok:
        raise Invalid(key, f"{what}, got {value!r}")


_PHRASES = {
    "bool_type": "must be true or false",
    "int_type": "must be an integer",
    "float_type": "must be a number",
    "string_type": "must be a string",
    "tuple_type": "must be a list",
    "list_type": "must be a list",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "dict_type": "must be a mapping",
    "too_long": "has too many items",
    "finite_number": "must be a finite number",
}


def _known(model: type[BaseModel], loc: tuple[str | int, ...]) -> str:
    """The keys the (nested) model at ``loc`` knows, comma-separated."""
    for part in loc:
        field = model.model_fields.get(str(part))
        if field is None or not (isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)):
            return ""
        model = field.annotation
    return ", ".join(sorted(model.model_fields))


def _field(model: type[BaseModel], loc: tuple[str | int, ...]) -> FieldInfo | None:
    """The field of the (nested) model at ``loc``, or None."""
    field = None
    for part in loc:
        if field is not None:
            if not (isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)):
                return None
            model = field.annotation
        field = model.model_fields.get(str(part))
        if field is None:
            return None
    return field


def _bounds(field: FieldInfo) -> str:
    """``must be in [0, 1]``, ``must be > 0 (pixels) or null``: the ``Field`` bounds of ``field`` in words."""
    marks = list(field.metadata)
    for arg in get_args(field.annotation):  # X | None: X's own Annotated bounds
        marks += [m for extra in get_args(arg)[1:] for m in getattr(extra, "metadata", [extra])]
    b = {op: getattr(m, op) for m in marks for op in ("ge", "gt", "le", "lt") if hasattr(m, op)}
    low, high = b.get("ge", b.get("gt")), b.get("le", b.get("lt"))
    if low is not None and high is not None:
        text = f"in {'[' if 'ge' in b else '('}{low:g}, {high:g}{']' if 'le' in b else ')'}"
    else:
        text = f"{'>=' if 'ge' in b else '>' if 'gt' in b else '<=' if 'le' in b else '<'} {low if high is None else high:g}"
    hint = f" ({field.description})" if field.description else ""
    return f"must be {text}{hint}" + (" or null" if type(None) in get_args(field.annotation) else "")


def _dotted(parts: list[str | int]) -> str:
    """``train.lr``, ``model.widths[2]`` from the parts of a location (empty parts skipped)."""
    key = ""
    for part in parts:
        if part != "":
            key += f"[{part}]" if isinstance(part, int) else f".{part}" if key else str(part)
    return key


def error_parts(exc: ValidationError, model: type[BaseModel], root: str = "") -> tuple[str, str]:
    """``(dotted key, 'what, got value')`` of the first error of ``exc`` (raised validating ``model``), the key after
    ``root`` (``train.lr``, ``model.widths[2]``); missing keys are reported together (``missing keys [...]``)."""
    errors = exc.errors()
    missing = [str(e["loc"][0]) for e in errors if e["type"] == "missing" and len(e["loc"]) == 1]
    if missing:
        return root, f"missing keys {missing}"
    error = errors[0]
    loc, kind = list(error["loc"]), error["type"]
    if kind == "missing":  # an item of a fixed-length tuple
        loc, kind = loc[:-1], "too_short"
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, Invalid):
        return _dotted([root, *loc, cause.key]), cause.text
    if kind == "extra_forbidden":
        return _dotted([root, *loc]), f"unknown key (known: {_known(model, tuple(loc[:-1]))})"
    field = _field(model, tuple(loc)) if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal") else None
    if field is not None:
        return _dotted([root, *loc]), f"{_bounds(field)}, got {shown(error['input'])}"
    what = _PHRASES.get(kind, "has too few items" if kind == "too_short" else error["msg"])
    return _dotted([root, *loc]), f"{what}, got {shown(error['input'])}"


SHOWN = 80
"""Characters of a bad value an error line shows."""


def shown(value: Any) -> str:
    """``value`` as an error line shows it: its repr on one line, cut to :data:`SHOWN` characters; an array by its
    type, dtype and shape."""
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        return f"{type(value).__name__} of {dtype} {list(shape)}"
    text = " ".join(repr(value).split())
    return text if len(text) <= SHOWN else text[: SHOWN - 3] + "..."


def error_line(exc: ValidationError, model: type[BaseModel], root: str = "") -> str:
    """:func:`error_parts` as one line, ``key: what, got value``."""
    key, text = error_parts(exc, model, root)
    return f"{key}: {text}" if key else text


_M = TypeVar("_M", bound="Section")


class Section(BaseModel):
    """A frozen config model: unknown keys refused, scalars as YAML writes them (:data:`Float` ...), no infinite or NaN
    number (``.inf`` as a limit switches its check off), and every error one :class:`ConfigError` line naming
    ``section.key``, from a dict (:meth:`from_raw`) or keywords (``ModelConfig(widths=(1, 2))``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    section: ClassVar[str] = ""

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise ConfigError(error_line(exc, type(self), self.section)) from None

    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]  # nested sections validate in pydantic-core, not here

    @classmethod
    def from_raw(cls: type[_M], raw: Any) -> _M:
        """The model from a nested dict; :class:`ConfigError` with one line for the first bad key."""
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            raise ConfigError(error_line(exc, cls, cls.section)) from None


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
