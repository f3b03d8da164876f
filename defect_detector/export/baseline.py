"""The drift baseline an export embeds in its ``meta.json``: chosen, then checked against the exported model.

Layer statistics are only comparable with a baseline calibrated on the same monitored layers, at the same
input size, with the same weights, so a mismatch is refused at export time rather than found as false drift
alerts in production.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from defect_detector.export.deploy_model import ExportError
from defect_detector.model.checkpoint import LoadedModel, weights_digest
from defect_detector.monitor.baseline import Baseline

BaselineArg = dict[str, Any] | str | os.PathLike[str] | None


def export_baseline(
    loaded: LoadedModel, baseline: BaselineArg, layer_names: Sequence[str], imgsz: int
) -> tuple[dict[str, Any] | None, str]:
    """The baseline to embed and where it came from: ``(Baseline.to_dict() or None, source)``.

    ``baseline``: a baseline JSON file (source ``"file PATH"``), a ``Baseline.to_dict()`` dict (source
    ``"argument"``), or None for the one the checkpoint carries (``loaded.baseline``, source ``"checkpoint"``;
    ``(None, "none")`` when it carries none). Raises ``BaselineError`` (a ValueError naming the file) for a
    missing or malformed baseline, and :class:`ExportError` when its ``layer_names`` are not the exported
    model's monitored ``layer_names``, its ``imgsz`` (when recorded) is not the export's ``imgsz``, its
    ``model["class_names"]`` (when recorded) are not the model's class names, or (a file or an argument) it was
    measured with other weights (:func:`check_weights`).
    """
    if isinstance(baseline, (str, os.PathLike)):
        where = os.fspath(baseline)
        parsed, source = Baseline.load(baseline), f"file {where}"
    elif baseline is not None:
        where = "baseline"
        parsed, source = Baseline.from_dict(baseline, where=where), "argument"
    elif loaded.baseline is not None:
        where = f"{loaded.path}: checkpoint baseline"
        parsed, source = Baseline.from_dict(loaded.baseline, where=where), "checkpoint"
    else:
        return None, "none"
    check_baseline(parsed, where, layer_names, imgsz, loaded.class_names)
    if source != "checkpoint":  # the one train attached was measured with its best.pt, and last.pt carries it too
        check_weights(parsed, where, loaded)
    return parsed.to_dict(), source


def check_weights(baseline: Baseline, where: str, loaded: LoadedModel) -> None:
    """Raise :class:`ExportError` (one line starting with ``where``) when ``baseline`` records the digest of the weights
    it was measured with (``model["weights_sha256"]``, ``calibrate`` of a checkpoint) and ``loaded``'s are others: the
    statistics of other weights put every clean frame off the baseline (false critical alerts). A baseline that records
    no digest (an artifact's, or an older one) is not checked."""
    recorded = baseline.model.get("weights_sha256")
    if recorded is None:
        return
    own = weights_digest(loaded.model)
    if recorded != own:
        measured = baseline.model.get("weights", "other weights")
        raise ExportError(
            f"{where}: baseline was measured with other weights ({measured}, sha256 {str(recorded)[:12]}), not "
            f"{loaded.path} (sha256 {own[:12]}); calibrate it with these: defect-detector calibrate --weights {loaded.path} ..."
        )


def check_baseline(baseline: Baseline, where: str, layer_names: Sequence[str], imgsz: int, class_names: Sequence[str]) -> None:
    """Raise :class:`ExportError` (one line starting with ``where``) when ``baseline`` does not fit the exported model."""
    if list(baseline.layer_names) != list(layer_names):
        raise ExportError(
            f"{where}: baseline layers {list(baseline.layer_names)} are not the exported model's monitored layers "
            f"{list(layer_names)}; calibrate a baseline for this model (defect-detector calibrate)"
        )
    if baseline.imgsz is not None and int(baseline.imgsz) != int(imgsz):
        raise ExportError(
            f"{where}: baseline was calibrated at imgsz {baseline.imgsz} but the export is imgsz {imgsz} (layer statistics "
            f"depend on the input size); export with --imgsz {baseline.imgsz} or calibrate at {imgsz}"
        )
    names = baseline.model.get("class_names")
    if names is not None and list(names) != list(class_names):
        raise ExportError(f"{where}: baseline was calibrated for classes {list(names)}, the model has {list(class_names)}")
