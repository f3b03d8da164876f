"""The configuration reference in ``docs/config.md``, generated from :mod:`defect_detector.core.config`'s pydantic
models (every section, key, type and default): ``python -m defect_detector.core.config_docs --update-docs``."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel

from defect_detector.core.config import RETIRED, Config, MonitorConfig
from defect_detector.core.typed_yaml import plain


def _type_name(hint: Any) -> str:
    """``int``, ``str or None``, ``tuple[float, float]``, ``tuple[str, ...]`` of a field annotation (the strictness
    markers of :mod:`defect_detector.core.typed_yaml` left out)."""
    origin, args = get_origin(hint), get_args(hint)
    if origin is Annotated:
        return _type_name(args[0])
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args)
    if origin is tuple:
        return "tuple[" + ", ".join("..." if a is Ellipsis else _type_name(a) for a in args) + "]"
    return "None" if hint is type(None) else getattr(hint, "__name__", str(hint))


def config_reference_markdown() -> str:
    """The configuration reference (every section, key, type and default) as Markdown.

    ``docs/config.md`` embeds this text between ``<!-- config-reference -->`` markers; a
    test regenerates it so the documentation cannot drift from the code.
    """
    lines: list[str] = []
    defaults = Config()
    for name in Config.model_fields:
        section = getattr(defaults, name)
        if isinstance(section, BaseModel):
            lines += _section(f"`{name}`", name, section)
    lines += _section("`monitor` (the file `predict --monitor-config` reads, not a training config)", "monitor", MonitorConfig())
    scalars = [name for name in Config.model_fields if not isinstance(getattr(defaults, name), BaseModel)]
    top = ", ".join(f"`{name}` (default `{getattr(defaults, name)!r}`)" for name in scalars)
    lines += ["### Retired keys", "", "A checkpoint's stored config may hold them (dropped when it loads); a config or an override that"]
    lines += ["names one stops at start, saying why.", "", "| key | why |", "| --- | --- |"]
    lines += [f"| `{key}` | {why} |" for key, why in RETIRED.items()]
    return "\n".join([f"Top-level keys: {top}.", ""] + lines).rstrip() + "\n"


def _section(title: str, name: str, section: BaseModel) -> list[str]:
    """The Markdown of one section: its docstring, then a row per key (type, default)."""
    doc = " ".join((type(section).__doc__ or "").split())
    lines = [f"### {title}", "", doc, "", "| key | type | default |", "| --- | --- | --- |"]
    for key, field in type(section).model_fields.items():
        lines.append(f"| `{name}.{key}` | `{_type_name(field.annotation)}` | `{plain(getattr(section, key))!r}` |")
    return [*lines, ""]


def _update_docs(path: Path) -> None:
    """Rewrite the config-reference section of ``docs/config.md`` from the code."""
    import re

    text = path.read_text()
    block = "<!-- config-reference -->\n" + config_reference_markdown() + "<!-- /config-reference -->"
    path.write_text(re.sub(r"<!-- config-reference -->\n.*?<!-- /config-reference -->", lambda _: block, text, flags=re.S))


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--update-docs"]:
        _update_docs(Path(__file__).resolve().parents[2] / "docs" / "config.md")
    else:
        print(config_reference_markdown())
