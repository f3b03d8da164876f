"""How an inspection is loaded, declared once (issue 57): :class:`InspectOptions`.

``Inspector.load(weights, **options)`` takes its fields as keywords, ``predict`` reads its flags into it
(:meth:`InspectOptions.of_args`: one flag per field, the same name), and an inspector that routes a design to other
bundled weights loads that sibling with the same options (:meth:`InspectOptions.for_weights`). A value of the wrong
type or out of range is one ``ValueError`` line naming the option, before anything loads.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError, model_validator

from defect_detector.core.typed_yaml import check, error_line

_PathLike = str | os.PathLike[str]
_Unit = Annotated[float, Field(allow_inf_nan=True)]


class InspectOptions(BaseModel):
    """Everything an inspection is loaded with. ``weights``: a checkpoint or exported artifact (None: the bundled model;
    with ``reference``, the bundled golden-template models, chosen per design). ``reference``: one golden image for
    every frame, or a folder of them (by frame name); a golden-template model needs it. ``device``: ``auto``, ``cpu``
    or ``cuda[:N]``. ``threads``: torch CPU threads (None: the cores free now, re-chosen every 2 s as frames are
    inspected on a CPU). ``tta``: test-time augmentation (``flip2``, ``flip4``, ``d8``: that many model passes per
    frame; None: one). ``conf`` (below 1) / ``iou``: None takes the operating point the weights store. ``max_det``:
    calls kept per model input. ``tile``: None chooses from the model's recorded pixel scale, True / False force
    tiling / letterboxing. ``monitor``: drift monitoring, on whenever a baseline exists (``baseline``: a ``calibrate``
    file, over the one the weights carry); ``monitor_config``: drift thresholds (a YAML path or a ``MonitorConfig``);
    ``alerts`` (JSONL), ``webhook`` (an http(s) URL), ``metrics_port`` / ``metrics_addr``: the sinks of drift events
    and frame metrics. ``db``: record every frame into this station database (a file path, ``sqlite:///...`` or
    ``postgresql://...``). ``precision``: a checkpoint's (``auto``: float32 on the CPU, float16 on CUDA; ``float32``;
    ``bf16``). ``trace_pattern``: a regular expression with named groups ``serial`` / ``lot`` / ``order`` read from
    each frame's file name; ``boards``: a panel's board outlines (a ``--boards`` file or its mapping)."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    weights: _PathLike | None = None
    reference: _PathLike | None = None
    device: str = "auto"
    threads: Annotated[StrictInt, Field(ge=1)] | None = None
    tta: str | None = None
    conf: _Unit | None = None
    iou: _Unit | None = None
    max_det: Annotated[StrictInt, Field(ge=1)] = 100
    tile: StrictBool | None = None
    monitor: StrictBool = True
    baseline: _PathLike | None = None
    monitor_config: Any = None
    alerts: _PathLike | None = None
    webhook: str | None = None
    metrics_port: Annotated[StrictInt, Field(ge=0, le=65535)] | None = None
    metrics_addr: str = "0.0.0.0"
    db: str | None = None
    precision: str = "auto"  # checked where it applies (``runtime.precision_half``), as for val
    trace_pattern: str | None = None
    boards: _PathLike | dict[str, Any] | None = None

    @model_validator(mode="after")
    def _check_values(self) -> InspectOptions:
        conf, iou = self.conf, self.iou
        check(conf is None or 0.0 <= conf < 1.0, "conf", "must be in [0, 1) (a score threshold of 1 or more passes every board)", conf)
        check(iou is None or 0.0 <= iou <= 1.0, "iou", "must be in [0, 1]", iou)
        return self

    @classmethod
    def checked(cls, **options: Any) -> InspectOptions:
        """The options from keywords; ``ValueError`` in one line naming the first bad one (``conf: must be ..., got 1.5``;
        an unknown keyword: ``unknown key (known: ...)``)."""
        try:
            return cls(**options)
        except ValidationError as exc:
            raise ValueError(error_line(exc, cls)) from None

    @classmethod
    def of_args(cls, args: argparse.Namespace) -> InspectOptions:
        """The options ``predict``'s flags give (each flag the field of its name; ``--no-monitor``: ``monitor``)."""
        given = {name: getattr(args, name) for name in cls.model_fields if name != "monitor" and hasattr(args, name)}
        return cls.checked(**given, monitor=not getattr(args, "no_monitor", False))

    def for_weights(self, weights: Path) -> InspectOptions:
        """These options on other ``weights``, for a sibling inspector: without the sinks and the station recording (its
        events go to the first inspector's sinks, and the first records its frames, traces and panels)."""
        update = {"weights": weights, "alerts": None, "webhook": None, "metrics_port": None, "db": None}
        return self.model_copy(update=update | {"trace_pattern": None, "boards": None})


__all__ = ["InspectOptions"]
