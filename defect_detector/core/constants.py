"""Constants shared across the rooms: the letterbox pad value, the default monitored layers, DeepPCB's classes."""

from __future__ import annotations

PAD_VALUE = 114
"""Grey level of "no data": letterbox padding, tile padding past a frame's edge, and the border a registered
reference or an augmented image exposes (black or white would paint copper or substrate)."""

DEEPPCB_CLASSES = ("open", "short", "mousebite", "spur", "copper", "pin-hole")
"""DeepPCB's defect types 1..6, in label order."""

DEFAULT_LAYERS = (
    "backbone.stem",
    "backbone.stage1",
    "backbone.stage2",
    "backbone.stage3",
)
"""Monitored by default: the stem and backbone stages 1-3, the layers the drift detector scores by default
(``MonitorConfig.layers``). Stage 4 and the neck outputs (``backbone.stage4``, ``neck.out3``, ``neck.out4``,
``neck.out5``, or ``neck.out*``) can be added by name; they follow board content more than the camera,
and every extra layer costs model time against the 3% the monitor is allowed on a CPU."""

LEVELS = ("dark", "median", "bright", "detail")
"""The entries of a frame's gray levels (``screens/blank.py`` ``image_levels``): gray levels 0-255 (1st percentile,
median, 99th percentile), and the fraction of pixels more than ``FLAT_DEVIATION`` levels from the median; the drift
baseline records them for the calibration frames."""

SATURATED = 250
"""Gray levels at or above this are saturated: the camera clipped them (the exposure screen counts them, the hidden-area
screen reads glare from them, the photometric fit and the golden view read such a pixel as a bound)."""

CRUSHED = 5
"""Gray levels at or below this are crushed: the camera clipped them (as :data:`SATURATED`, at the dark end)."""
