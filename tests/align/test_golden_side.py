"""The golden check's golden side (align/golden_check.py ``GoldenSide``), prepared once per design and matrix: the check
it gives is the check without it, on true pairs, painted defects, another design and a shifted golden image; a fixed
fixture's design prepares it once over many frames (issue 46)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import cv2
import numpy as np
import pytest
from golden_pairs import gray, paint_blobs

from defect_detector.align import register as register_module
from defect_detector.align.golden_check import compare, differing, golden_side, structure
from defect_detector.align.register import Registrar, _checked, check_pair, register
from defect_detector.core.config_register import RegisterConfig
from defect_detector.inspect.designs import Designs

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"
BOARDS = ("50600000", "92000030")



def _pair(board: str) -> tuple[np.ndarray, np.ndarray]:
    """``(frame, golden image)`` uint8 ``[640, 640]`` of a bundled DeepPCB sample."""
    return gray(SAMPLES / "deeppcb" / f"{board}_test.jpg"), gray(SAMPLES / "golden" / f"{board}_test.jpg")


def _moved(image: np.ndarray, dx: float, dy: float) -> np.ndarray:
    return cv2.warpAffine(image, np.float64([[1, 0, dx], [0, 1, dy]]), image.shape[::-1], borderMode=cv2.BORDER_REPLICATE)



def _frames(board: str) -> dict[str, np.ndarray]:
    """The frames checked against ``board``'s golden image: the true board, moved 0.5 px, with painted defects, and a
    board of another design (the other sample)."""
    frame, _ = _pair(board)
    other, _ = _pair(next(b for b in BOARDS if b != board))
    return {"true": frame, "moved": _moved(frame, 0.5, 0.5), "painted": paint_blobs(frame), "another design": other}


def _fields(reg: register_module.Registration) -> dict[str, object]:
    """A registration's recorded values (the covered mask as bytes)."""
    out = {f.name: getattr(reg, f.name) for f in dataclasses.fields(reg) if f.name not in ("matrix", "covered_mask")}
    return {**out, "matrix": np.asarray(reg.matrix).tobytes(), "covered": None if reg.covered_mask is None else reg.covered_mask.tobytes()}


@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("shift", [(0.0, 0.0), (6.0, -4.0)], ids=["registered", "golden 6 px off"])
def test_one_golden_side_measures_every_frame_as_the_check_without_it(board: str, shift: tuple[float, float]) -> None:
    """A golden side prepared once (the golden image registered into the true board, or moved 6 px off it) measures each
    frame exactly as :func:`differing` and :func:`structure` prepared for that frame alone: the same differing pixels,
    the same :class:`Structure` (so the same refusal)."""
    frame, golden = _pair(board)
    warped, reg = register(golden, frame)
    warped = _moved(warped, *shift)
    valid = reg.covered(frame.shape)
    side = golden_side(warped, valid)
    refused = {}
    for name, image in _frames(board).items():
        cached = compare(side, image)
        alone = differing(warped, image, valid)
        assert cached.side is side and alone.side is not side
        assert np.array_equal(cached.differs, alone.differs), name
        found = structure(*cached)
        assert found == structure(alone.differs, alone.valid, alone.golden), name  # cells and features computed anew
        refused[name] = found.another_design()
    off = shift != (0.0, 0.0)
    assert refused["another design"] and refused["true"] == off and refused["moved"] == off
    assert off or not refused["painted"]


@pytest.mark.parametrize("board", BOARDS)
def test_a_registrar_reusing_its_golden_side_decides_as_a_fresh_check(board: str) -> None:
    """The registrar of a fixed fixture checks every frame with the golden side kept with its matrix: each result, refusals
    and their words included, equals the check of that matrix with a golden side prepared for the frame alone."""
    frame, golden = _pair(board)
    registrar = Registrar(golden)
    registrar(frame)
    warped, cached, _, _ = registrar._cache
    frames = {**_frames(board), "golden image 6 px off": frame}
    for name, image in frames.items():
        if name == "golden image 6 px off":
            shifted = _moved(warped, 6.0, -4.0)  # what a reused matrix 6 px off would warp: a side prepared for it
            kept, side = _checked(dataclasses.replace(cached, reused=True), shifted, image, golden, registrar.cfg, keep=True)
            again, used = _checked(dataclasses.replace(cached, reused=True), shifted, image, golden, registrar.cfg, side)
            fresh, none = _checked(dataclasses.replace(cached, reused=True), shifted, image, golden, registrar.cfg)
            assert side is not None and used is side and none is None
            assert _fields(again) == _fields(fresh) == _fields(kept) and not again.ok
            continue
        _, reg = registrar(image)
        fresh, _ = _checked(dataclasses.replace(cached, score=reg.score, reused=True), warped, image, golden, registrar.cfg)
        if reg.reused:
            assert _fields(reg) == _fields(fresh), name
        assert reg.ok == (name != "another design"), (name, reg.reason)


def test_a_fixed_fixture_prepares_its_golden_side_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight frames of one board in a fixture (moved 0-0.5 px): registration is reused and the golden side is prepared
    once, on the first reuse (calls counted), where the check prepared it for every frame before issue 46."""
    calls = []
    prepare = register_module.golden_side
    monkeypatch.setattr(register_module, "golden_side", lambda *a, **k: calls.append(1) or prepare(*a, **k))
    frame, golden = _pair(BOARDS[0])
    designs = Designs(None, RegisterConfig())
    moves = [(0.0, 0.0), (0.5, 0.0), (0.0, 0.5), (0.5, 0.5)] * 2
    regs = []
    for i, (dx, dy) in enumerate(moves):
        design, _ = designs.find(f"f{i}.png", golden)
        regs.append(designs.register(design, _moved(frame, dx, dy), f"f{i}.png")[1])
    assert all(r.ok for r in regs) and sum(r.reused for r in regs) == len(moves) - 1
    assert len(calls) == 1 and design.registrar.prepared == 1


def test_a_golden_image_used_as_given_prepares_its_golden_side_once_per_frame_shape() -> None:
    """``--no-register``: the design's golden side is prepared on its first frame and reused after (a frame of another
    size is refused before any is prepared); each result is :func:`check_pair`'s."""
    frame, golden = _pair(BOARDS[0])
    registrar = Registrar(golden)
    frames = [*_frames(BOARDS[0]).values(), frame[:600, :600], _moved(golden, 6.0, -4.0)]
    for image in frames:
        assert _fields(registrar.as_given(image)) == _fields(check_pair(golden, image)), image.shape
    assert registrar.prepared == 1
    assert [registrar.as_given(image).ok for image in frames] == [True, True, True, False, False, False]
