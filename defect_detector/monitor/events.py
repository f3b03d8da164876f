"""The events the drift monitor raises, one line each in the ``--alerts`` file (DESIGN.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from defect_detector.monitor.baseline import utc_now

CHANGEOVER_KEYS = ("event", "frame", "source", "time", "reference", "previous", "reason")
"""The keys of a ``changeover`` line: DESIGN.md's, and the reason logged with it."""


@dataclass
class DriftEvent:
    """One alert line (DESIGN.md ``--alerts``).

    ``event`` is ``"drift"``, ``"recovered"``, ``"rebaseline"`` (the line reference was set or cleared) or
    ``"changeover"`` (a new golden image: ``reference`` and ``previous`` name the new and the old one);
    ``frame`` the 0-based frame index of the update that raised it; ``time`` ISO 8601 UTC;
    ``severity`` ``"warning"``, ``"critical"`` or ``"info"`` (the others); ``score`` the frame score
    (Mahalanobis distance, module docstring); ``layers`` the scored layers with a statistic at ``|z| >= 1``
    (else the one that moved most), highest first; ``statistic`` the statistic ("mean"/"std") that moved in most of
    them; ``observed`` / ``baseline`` per listed layer: that statistic's window mean and the normal level it is
    compared with; ``z`` per listed layer its z-score; ``reason`` what the image shows, the likely cause and what to
    do; ``cause`` the simulated fault the change looks like (``monitor/explain.py``; ``"blank"`` for a blank frame;
    None when unknown or not a drift event); ``since`` the first frame the monitor flagged (drift events; every
    frame's ``drift`` field reads ``warning`` or ``critical`` from there, ``DriftDetector.flag``).
    """

    event: str
    frame: int
    source: str
    severity: str
    score: float
    layers: list[str]
    reason: str
    statistic: str | None = None
    observed: dict[str, float] = field(default_factory=dict)
    baseline: dict[str, float] = field(default_factory=dict)
    z: dict[str, float] = field(default_factory=dict)
    cause: str | None = None
    since: int | None = None
    reference: str | None = None
    previous: str | None = None
    time: str = field(default_factory=utc_now)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object written per line: DESIGN.md's keys first, then the details."""
        if self.event == "changeover":
            return {k: getattr(self, k) for k in CHANGEOVER_KEYS}
        return {
            "event": self.event,
            "frame": self.frame,
            "source": self.source,
            "time": self.time,
            "severity": self.severity,
            "score": round(float(self.score), 3),
            "layers": list(self.layers),
            "reason": self.reason,
            "statistic": self.statistic,
            "cause": self.cause,
            "since": self.since,
            "observed": {k: float(v) for k, v in self.observed.items()},
            "baseline": {k: float(v) for k, v in self.baseline.items()},
            "z": {k: round(float(v), 3) for k, v in self.z.items()},
        }
