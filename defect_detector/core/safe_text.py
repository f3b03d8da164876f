"""Text that leaves the process safely: secrets in URLs masked for logs and summaries, CSV cells that a spreadsheet
would run as formulas escaped.

- :func:`mask_secrets` masks every URL in a text (``scheme://...``): the user info (user and password) becomes
  ``***``, and so does every query value and the fragment; scheme, host, port and path stay, so the line still says
  which server it was. ``postgresql://line:pw@db:5432/station`` -> ``postgresql://***@db:5432/station``;
  ``https://hooks.example/x?key=abc`` -> ``https://hooks.example/x?key=***``. :class:`MaskingFilter` applies it to
  every log record a handler emits (the CLI installs it on its handlers).
- :func:`csv_cell` escapes a cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return with a
  leading single quote (OWASP's advice against CSV injection): ``=1+2+cmd|calc!A0.jpg`` is written
  ``'=1+2+cmd|calc!A0.jpg``, which a spreadsheet shows as text. Numbers are left alone (a negative number is a
  number, not a formula).
- :func:`show_controls` writes the bidirectional controls a file name may hide (a right-to-left override turns
  ``board_gpj.exe`` into a name that reads ``board_exe.jpg``) as visible ``<U+202E>``: the station's pages and every CSV
  show the name as it is.
"""

from __future__ import annotations

import logging
import re
import urllib.parse
from typing import Any

MASK = "***"
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>()\[\]{},;]+")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _mask_query(query: str) -> str:
    parts = []
    for item in query.split("&"):
        key, sep, value = item.partition("=")
        parts.append(f"{key}={MASK}" if sep and value else item if sep else (MASK if key else item))
    return "&".join(parts)


def mask_url(url: str) -> str:
    """``url`` with its user info, query values and fragment replaced by ``***`` (see the module docstring); a text
    that does not parse as a URL is masked whole after its scheme."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        scheme = url.split("://", 1)[0]
        return f"{scheme}://{MASK}"
    if "@" not in parts.netloc and not parts.query and not parts.fragment:
        return url
    netloc = f"{MASK}@{parts.netloc.rsplit('@', 1)[1]}" if "@" in parts.netloc else parts.netloc
    query = f"?{_mask_query(parts.query)}" if parts.query else ""
    fragment = f"#{MASK}" if parts.fragment else ""
    return f"{parts.scheme}://{netloc}{parts.path}{query}{fragment}"


def mask_secrets(text: str) -> str:
    """``text`` with every URL in it masked by :func:`mask_url` (user info, query values, fragment)."""
    if "://" not in text:
        return text
    return _URL.sub(_mask_match, text)


def _mask_match(match: re.Match[str]) -> str:
    """One URL found in a text, masked; punctuation that ends a sentence after it stays outside."""
    url = match.group(0)
    core = url.rstrip(".:!?")
    return mask_url(core) + url[len(core) :]


class MaskingFilter(logging.Filter):
    """A handler filter that masks the secrets of URLs (:func:`mask_secrets`) in every record's final message."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is logging's to report, as it would be without the filter
            return True
        masked = mask_secrets(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


def install_masking(logger: logging.Logger | None = None) -> None:
    """Add a :class:`MaskingFilter` to every handler of ``logger`` (default: the root logger) that lacks one."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, MaskingFilter) for f in handler.filters):
            handler.addFilter(MaskingFilter())


def show_controls(text: str) -> str:
    """``text`` with each bidirectional control character (``U+202E`` right-to-left override ...) written as a visible
    ``<U+202E>``, so a name cannot display as another."""
    return _BIDI.sub(lambda m: f"<U+{ord(m.group()):04X}>", text)


def csv_cell(value: Any) -> Any:
    """``value`` as a CSV cell that no spreadsheet runs as a formula or displays as other text: a string starting with
    ``=``, ``+``, ``-``, ``@``, tab or CR gets a leading ``'``, bidirectional controls are made visible
    (:func:`show_controls`); everything else (numbers included) is returned as it is."""
    if not isinstance(value, str):
        return value
    value = show_controls(value)
    return "'" + value if value.startswith(_FORMULA_START) else value
