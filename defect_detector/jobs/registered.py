"""The golden image as the board sees it, for callers that run the model themselves (``defect-detector align``; issue 58):
a Triton server, ONNX Runtime, the C++ example.

Each board of an image, a folder or a glob (read as ``predict`` reads it: ``inspect/sources.py``) goes through the
inspector's prepare stage (``inspect/prepare.py``: its golden image looked up as ``predict --reference`` looks it up,
registered, the golden check, the photometric fit and the screens, by the weights that would inspect it:
``Inspector.prepared``). Nothing here registers, fits or screens on its own. For a board named ``NAME.EXT`` (its path
relative to the source; a multi-page TIFF's page ``N`` from its second ``NAME_pageN``) the folder ``out`` gets:

- ``NAME.png``: uint8 ``[H, W]``, the board's size: its golden image registered into the board's pixels at the board's
  levels, the second channel ``predict`` gives a golden-template model. Where the golden image has no data
  (``covered`` below 1: the board moved past its edge) it holds the pad value (114) as the fit maps it; ``predict``
  drops the calls whose centre lies there. Written only for a pair that is not refused; a refused pair's earlier
  ``NAME.png`` is removed, so no stale golden image is fed to a model.
- ``NAME.json``: the record (:func:`record_json`): the golden image, the weights, whether the pair was refused, with the
  refusal's kind, message and values, and the registration (geometry, score, golden check, photometric fit) when there
  is one.

Both are written atomically (``core/io.py``). Before any board is read, ``out`` is refused when it is (or is inside)
the boards' folder or the golden images' folder (a next run would read the written images as boards or golden images),
and so are two boards that would write one ``NAME``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import cv2

from defect_detector.core.frame_record import Prepared
from defect_detector.core.io import atomic_write_bytes, atomic_write_json
from defect_detector.inspect.inspector import Inspector
from defect_detector.inspect.record import registration_json
from defect_detector.inspect.sources import FrameSource, open_source, reads_back, source_kind

BOARD_KINDS = ("image", "folder", "glob")
"""The sources ``align`` reads boards from."""


@dataclass(frozen=True)
class Aligned:
    """What ``align`` wrote for one board: its ``name`` (relative to the source), the ``record`` (:func:`record_json`),
    the ``image`` path written (None: refused) and the ``record_path``."""

    name: str
    record: dict[str, Any]
    image: Path | None
    record_path: Path

    @property
    def refused(self) -> bool:
        return self.image is None


def output_stem(file_name: str) -> str:
    """The name a board's outputs take in the out folder: its path relative to the source without its extension;
    ``a/b.tif#page2`` (a multi-page TIFF's second page) -> ``a/b_page2``."""
    base, _, page = file_name.partition("#")
    stem = PurePosixPath(base).with_suffix("").as_posix()
    return f"{stem}_{page}" if page else stem


def record_json(prepared: Prepared, weights: str, image_name: str | None) -> dict[str, Any]:
    """The ``NAME.json`` record of one board: ``board`` (its name relative to the source), ``golden`` (its golden image's
    file name; None when none was found), ``design`` (the fingerprint of the golden image's pixels), ``weights`` (whose
    register settings, exposure range and photometric range judged it), ``refused``, ``refusal`` (``kind``, the typed
    refusal's label; ``message``; ``values`` measured; None when not refused), ``image`` (the registered golden image's
    file name, None when refused), ``size`` ``[W, H]`` of the board, ``covered`` (the share of the board the golden image
    has data for) and ``registration`` (``inspect/record.py`` ``registration_json``: shift, angle, score, difference,
    spread, reused, model, scale, perspective, lens, grid, local residual, photometric fit; None when the pair was
    refused before registration or by the golden check), ``design_warning`` (the golden image looks unlike the weights'
    training images, or finer than validated: ``predict`` passes a board of it with no call only as ``pass_suspect``;
    None when not)."""
    frame, refusal = prepared.frame, prepared.refusal
    shape = frame.image.shape if frame.image is not None else None
    covered = prepared.covered
    return {
        "board": frame.file_name,
        "golden": prepared.golden_name,
        "design": prepared.golden_key,
        "weights": weights,
        "refused": refusal is not None,
        "refusal": None if refusal is None else {"kind": refusal.kind.value, "message": refusal.message, "values": dict(refusal.values)},
        "image": image_name,
        "size": None if shape is None else [int(shape[1]), int(shape[0])],
        "covered": None if covered is None else round(float(covered.mean()), 4),
        "registration": registration_json(prepared.registration),
        "design_warning": prepared.design_warning,
    }


def open_boards(boards: str) -> FrameSource:
    """The boards of ``boards`` (an image, a folder or a glob), listed, nothing read yet; ``ValueError`` /
    ``FileNotFoundError`` in one line for a missing path, a source of another kind, or a folder without images."""
    kind = source_kind(boards)
    if kind not in BOARD_KINDS:
        raise ValueError(f"{boards}: align takes an image, a folder or a glob of boards, not a {kind}")
    return open_source(boards)


def align_boards(inspector: Inspector, source: FrameSource, out: str | Path) -> Iterator[Aligned]:
    """What was written for each board of ``source`` (:func:`open_boards`), in its order, as the registered golden image
    and the record are written into the folder ``out`` (module docstring). ``out`` is checked now, before any board is
    read: ``ValueError`` in one line when it is a file, is or lies inside the boards' or the golden images' folder, or
    when two boards would write one output name."""
    out = Path(out)
    _check_out(source, out, inspector)
    return _aligned(inspector, source, out)


def _aligned(inspector: Inspector, source: FrameSource, out: Path) -> Iterator[Aligned]:
    with source:
        for frame in source:
            prepared, weights = inspector.prepared(frame)
            yield _write(prepared, weights, out)


def _write(prepared: Prepared, weights: str, out: Path) -> Aligned:
    """One board's outputs in ``out``: the registered golden image (not when refused: an earlier one is removed) and
    its record."""
    stem = output_stem(prepared.frame.file_name)
    image_path, record_path = out / f"{stem}.png", out / f"{stem}.json"
    if prepared.refused or prepared.golden is None:
        image_path.unlink(missing_ok=True)
        record = record_json(prepared, weights, None)
        atomic_write_json(record_path, record)
        return Aligned(prepared.frame.file_name, record, None, record_path)
    ok, encoded = cv2.imencode(".png", prepared.golden)
    if not ok:
        raise ValueError(f"{image_path}: cannot encode the registered golden image as PNG")
    atomic_write_bytes(image_path, encoded.tobytes())
    record = record_json(prepared, weights, image_path.name)
    atomic_write_json(record_path, record)
    return Aligned(prepared.frame.file_name, record, image_path, record_path)


def _check_out(source: FrameSource, out: Path, inspector: Inspector) -> None:
    """Refuse (``ValueError``, one line) an ``out`` that is a file, is or lies inside the boards' folder or the golden
    images' folder, or would write an image the boards' source reads (a glob's match, the board itself) or the golden
    image; and two boards whose outputs take one name (``a.jpg`` and ``a.png`` in one folder)."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out}: a file; align writes a folder of registered golden images and records")
    references, folders = inspector.references, []
    if source.kind == "folder":
        folders.append(("the boards' folder", Path(source.source)))
    if references is not None and not references.single:
        folders.append(("the golden images' folder", references.path))
    for what, folder in folders:
        if out.resolve().is_relative_to(folder.resolve()):
            raise ValueError(f"--out {out} is or lies inside {what} {folder}: its images would be read back; choose a folder outside it")
    seen: dict[str, str] = {}
    for _, name in source.files:
        stem = output_stem(name)
        first = seen.setdefault(stem, name)
        if first != name:
            raise ValueError(f"{first} and {name} would both write {stem}.png in --out {out}; rename one of them")
        image = out / f"{stem}.png"
        golden = references is not None and references.single and image.resolve() == references.path.resolve()
        if golden or reads_back(source.source, source.kind, image):
            what = "the golden image" if golden else f"a board of {source.source}"
            raise ValueError(f"--out {out}: its {image.name} would overwrite or be read back as {what}; choose another folder")
