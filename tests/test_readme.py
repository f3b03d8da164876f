"""The configuration reference (docs/config.md) is generated from the config classes and must match them; the README
stays a quick start."""

import re
from pathlib import Path

from defect_detector.core.config_docs import config_reference_markdown

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "config.md"


def test_config_reference_is_current() -> None:
    text = REFERENCE.read_text()
    match = re.search(r"<!-- config-reference -->\n(.*?)<!-- /config-reference -->", text, re.S)
    assert match, "docs/config.md lacks the config-reference markers"
    assert match.group(1) == config_reference_markdown(), "regenerate it with: python -m defect_detector.core.config_docs --update-docs"


def test_readme_is_a_quick_start_with_links_that_resolve() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
        assert (ROOT / target).exists(), f"README links to {target}, which does not exist"


def test_what_is_where_lists_every_room_at_its_layer() -> None:
    """Issue 57: the README's "What is where" named rooms that had moved; each room of the package is listed once, at the
    layer ``tests/test_layering.py`` holds it to, and nothing else is listed as a room."""
    from test_layering import LAYERS

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("## What is where", 1)[1].split("```", 2)[1]
    listed = dict(re.findall(r"^  (\w+)/\s+L(\d)\s", block, flags=re.M))
    rooms = {p.name for p in (ROOT / "defect_detector").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert set(listed) == rooms == set(LAYERS)
    assert {room: int(layer) for room, layer in listed.items()} == LAYERS
