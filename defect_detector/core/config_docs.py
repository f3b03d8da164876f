"""The configuration reference in ``docs/config.md``, generated from :mod:`defect_detector.core.config`'s dataclasses
(every section, key, type and default): ``python -m defect_detector.core.config_docs --update-docs``."""

from __future__ import annotations

import dataclasses
from dataclasses import fields
from pathlib import Path
from typing import get_type_hints

from defect_detector.core.config import Config
from defect_detector.core.typed_yaml import plain


def config_reference_markdown() -> str:
    """The configuration reference (every section, key, type and default) as Markdown.

    ``docs/config.md`` embeds this text between ``<!-- config-reference -->`` markers; a
    test regenerates it so the documentation cannot drift from the code.
    """
    lines: list[str] = []
    for section in fields(Config):
        default = getattr(Config(), section.name)
        if not dataclasses.is_dataclass(default):
            continue
        doc = " ".join((type(default).__doc__ or "").split())
        lines += [f"### `{section.name}`", "", doc, "", "| key | type | default |", "| --- | --- | --- |"]
        hints = get_type_hints(type(default))
        for f in fields(default):
            type_name = str(hints[f.name]).replace(" | ", " or ").replace("typing.", "").replace("<class '", "").replace("'>", "")
            lines.append(f"| `{section.name}.{f.name}` | `{type_name}` | `{plain(getattr(default, f.name))!r}` |")
        lines.append("")
    top = ", ".join(
        f"`{f.name}` (default `{getattr(Config(), f.name)!r}`)"
        for f in fields(Config)
        if not dataclasses.is_dataclass(getattr(Config(), f.name))
    )
    return "\n".join([f"Top-level keys: {top}.", ""] + lines).rstrip() + "\n"


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
