"""The README's configuration reference is generated from the config classes and must match them."""

import re
from pathlib import Path

from defect_detector.core.config import config_reference_markdown

README = Path(__file__).resolve().parent.parent / "README.md"


def test_config_reference_is_current() -> None:
    text = README.read_text()
    match = re.search(r"<!-- config-reference -->\n(.*?)<!-- /config-reference -->", text, re.S)
    assert match, "README lacks the config-reference markers"
    assert match.group(1) == config_reference_markdown(), "regenerate it with: python -m defect_detector.core.config --update-readme"
