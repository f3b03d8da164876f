"""Every limit the prepare stage judges a frame by, in one typed model carried by the weights and settable per design.

:class:`Limits` holds the exposure range (``screens/exposure.py``), the photometric range (``align/photometric.py``),
the largest hidden region (``screens/hidden.py``) and the registration section (``core/config_register.py``: the
registration's residual and bend, the fixture's shift and angle, the golden check). A checkpoint's limits come from
its config (``eval.exposure_*``, ``eval.hidden_max_area``, the ``register`` section: :meth:`Limits.of_config`); an
artifact's meta.json stores them once, under ``"limits"`` (:meth:`Limits.of_meta` reads the keys of artifacts
exported before it). A taught design may carry its own (its entry's ``"limits"``: only the keys it sets, over the
weights'; :meth:`Limits.for_design`), which every stage then reads for that design's frames
(``Pipeline.limits_for``). A bad key or value is one :class:`~defect_detector.core.typed_yaml.ConfigError` line
naming ``limits.<key>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

import numpy as np
from pydantic import Field

from defect_detector.core.config_register import RegisterConfig
from defect_detector.core.typed_yaml import ConfigError, Float, Section, Share, plain


class ExposureLimits(Section):
    """The exposure range a model was validated at (``screens/exposure.py`` ``exposure_reason``). ``min_light``: least
    bright level, as a fraction of the reference's; ``min_contrast``: least level range (bright - dark), as a fraction
    of the reference's; ``max_clipped``: most saturated plus crushed share of the frame beyond the golden image's
    (golden images only); ``max_highlights``: most share of the bright pixels saturated (None: not checked; a look
    whose whites are clipped by design, such as a synthetic binarized board, has 1.0); ``max_midtones``: most share of
    mid-tone pixels beyond the reference's (None: not checked)."""

    section: ClassVar[str] = "limits.exposure"

    min_light: Share = 0.6
    min_contrast: Share = 0.6
    max_clipped: Share = 0.2
    max_highlights: Share | None = None
    max_midtones: Share | None = None


class PhotometricLimits(Section):
    """The level changes the weights were validated for (``align/photometric.py`` ``photometric_reason``): the line's
    capture variation (gain and gamma 0.85-1.15, offset +-10 levels, a gradient of +-12%) with a margin. A fit is
    judged by what it does where the golden image has levels, not by its parameters: each level must map within the
    envelope (:meth:`envelope`) of the maps ``g -> a * 255 * (g / 255) ** gamma + o`` with the gain ``a`` within
    1/(1 + ``max_gain``) to 1 + ``max_gain``, ``gamma`` likewise with ``max_gamma``, and ``|o| <= max_offset`` grey
    levels; ``max_light_range``: the light field's +- fraction."""

    section: ClassVar[str] = "limits.photometric"

    max_gain: Annotated[Float, Field(gt=0, le=4)] = 0.25
    max_gamma: Annotated[Float, Field(gt=0, le=4)] = 0.25
    max_light_range: Annotated[Float, Field(ge=0, le=1)] = 0.2
    max_offset: Annotated[Float, Field(ge=0, le=255, description="grey levels")] = 20.0

    def envelope(self, levels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """float64 ``(lowest, highest)`` board levels the validated maps give golden ``levels`` (0-255)."""
        x = np.clip(np.asarray(levels, np.float64), 0.0, 255.0) / 255.0
        a, g = 1.0 + self.max_gain, 1.0 + self.max_gamma
        return 255.0 / a * x**g - self.max_offset, 255.0 * a * x ** (1.0 / g) + self.max_offset


class Limits(Section):
    """The limits of the prepare stage (module docstring): ``exposure``, ``photometric``, ``hidden_max_area`` (the
    largest region of a frame, as a share of it, that may be hidden before it is not inspected; glare at any size;
    None: only glare) and ``register``."""

    section: ClassVar[str] = "limits"

    exposure: ExposureLimits = Field(default_factory=ExposureLimits)
    photometric: PhotometricLimits = Field(default_factory=PhotometricLimits)
    hidden_max_area: Share | None = 0.005
    register: RegisterConfig = Field(default_factory=RegisterConfig)

    @classmethod
    def of_config(cls, cfg: Any) -> Limits:
        """The limits a training config validates its weights at: ``eval.exposure_*``, ``eval.hidden_max_area`` and its
        ``register`` section (the photometric range at its defaults)."""
        ev = cfg.eval
        exposure = {key: getattr(ev, f"exposure_{key}") for key in ExposureLimits.model_fields}
        return cls(exposure=ExposureLimits(**exposure), hidden_max_area=ev.hidden_max_area, register=cfg.register)

    @classmethod
    def of_meta(cls, meta: Mapping[str, Any]) -> Limits:
        """The limits an artifact's meta stores (``"limits"``); for one exported before they were stored together, its
        operating point's ``exposure`` and ``hidden_max_area`` and its ``"register"`` (each absent: the defaults).
        :class:`ConfigError` naming the key for a bad one."""
        if meta.get("limits") is not None:
            return cls.from_raw(meta["limits"])
        point = meta.get("operating_point") or {}
        raw: dict[str, Any] = {"exposure": point.get("exposure") or {}, "register": meta.get("register") or {}}
        if "hidden_max_area" in point:
            raw["hidden_max_area"] = point["hidden_max_area"]
        try:
            return cls.from_raw(raw)
        except ConfigError as exc:  # named by the key the artifact has
            raise ConfigError(str(exc).replace("limits.register.", "register.", 1)) from None

    def for_design(self, overrides: Mapping[str, Any] | None) -> Limits:
        """These limits with a design's own ``overrides`` (a nested mapping of only the keys it sets, as ``teach``
        stores them) over them; :class:`ConfigError` naming ``limits.<key>`` for a bad one."""
        if not overrides:
            return self
        if not isinstance(overrides, Mapping):
            raise ConfigError(f"limits: must be a mapping of the keys a design sets, got {type(overrides).__name__}")
        return Limits.from_raw(_merged(self.to_dict(), dict(overrides)))

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (JSON, a checkpoint)."""
        return plain(self.model_dump())

    def changed(self, other: Limits) -> dict[str, Any]:
        """The nested keys whose values differ in ``other`` from these, with ``other``'s values: what a design sets."""
        return _difference(self.to_dict(), other.to_dict())


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``over``'s keys set, nested mappings merged key by key."""
    out = dict(base)
    for key, value in over.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _difference(base: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in other.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            inner = _difference(base[key], value)
            if inner:
                out[key] = inner
        elif base.get(key) != value:
            out[key] = value
    return out
