"""Reference registration (defect_detector.align.register) on real DeepPCB boards and known synthetic motions."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from defect_detector.align.register import FILL_VALUE, Registrar, check_pair, matrix_to_shift_angle, register
from defect_detector.core.config_register import RegisterConfig
from defect_detector.core.typed_yaml import ConfigError

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples" / "deeppcb"
GOLDEN = SAMPLES.parent / "golden"  # each sample board's DeepPCB template, under the board's file name
TOL_PX = 0.5  # the recovered transform must map every probe point within this of the truth


def _read(name: str) -> np.ndarray:
    """A sample board (``<id>_test.jpg``) or its golden template (``<id>_temp.jpg``, kept in ``golden/<id>_test.jpg``)."""
    path = GOLDEN / name.replace("_temp.jpg", "_test.jpg") if name.endswith("_temp.jpg") else SAMPLES / name
    image = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)
    assert image is not None, f"missing sample {path}"
    return image


@pytest.fixture(scope="module")
def template() -> np.ndarray:
    return _read("50600000_temp.jpg")


@pytest.fixture(scope="module")
def inspected() -> np.ndarray:
    return _read("50600000_test.jpg")


def _rigid(shape: tuple[int, ...], angle: float, dx: float, dy: float) -> np.ndarray:
    """2x3 float64: rotate by ``angle`` degrees (cv2 convention) about the image centre, then shift by (dx, dy)."""
    h, w = shape[:2]
    m = cv2.getRotationMatrix2D(((w - 1) / 2, (h - 1) / 2), angle, 1.0)
    m[:, 2] += (dx, dy)
    return m


def _probe_error(found: np.ndarray, truth: np.ndarray, shape: tuple[int, ...]) -> float:
    """Largest distance (px) between where ``found`` and ``truth`` map the four corners and the centre of ``shape``."""
    h, w = shape[:2]
    pts = np.array([[0, w - 1, 0, w - 1, (w - 1) / 2], [0, 0, h - 1, h - 1, (h - 1) / 2], [1, 1, 1, 1, 1]], dtype=np.float64)
    return float(np.hypot(*((found - truth) @ pts)).max())


def _move(image: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    return cv2.warpAffine(image, matrix, (image.shape[1], image.shape[0]), flags=cv2.INTER_LINEAR, borderValue=FILL_VALUE)


MOTIONS = [
    (2.0, 20.0, 20.0),
    (-2.0, -20.0, 20.0),
    (2.0, -20.0, -20.0),
    (-2.0, 20.0, -20.0),
    (0.0, 0.0, 0.0),
    (0.7, -3.3, 11.6),
    (-1.4, 0.4, -0.6),
]


@pytest.mark.parametrize("angle,dx,dy", MOTIONS)
def test_recovers_known_rigid_motion(template: np.ndarray, angle: float, dx: float, dy: float) -> None:
    truth = _rigid(template.shape, angle, dx, dy)
    warped, reg = register(template, _move(template, truth))
    assert reg.ok and reg.reason == "" and not reg.reused
    assert _probe_error(reg.matrix, truth, template.shape) < TOL_PX
    assert reg.angle_deg == pytest.approx(-angle, abs=0.02)  # cv2's angle is counter-clockwise on screen
    assert reg.shift_px == pytest.approx(np.hypot(dx, dy), abs=0.2)
    assert reg.score > 0.97 and reg.overlap > 0.85
    assert warped.dtype == np.uint8 and warped.shape == template.shape
    assert reg.matrix.dtype == np.float64 and reg.matrix.shape == (2, 3) and not reg.matrix.flags.writeable


def _structure(image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float64 ``(xs, ys)``: every 5th edge pixel (Canny) of ``image`` 20 px or more inside it: where a misregistration
    shows (a DeepPCB board's empty corners constrain nothing, and a difference there shows nowhere)."""
    ys, xs = np.nonzero(cv2.Canny(image, 50, 150)[20:-20, 20:-20])
    return xs[::5] + 20.0, ys[::5] + 20.0


@pytest.mark.parametrize("angle,dx,dy", [(1.5, -12.0, 17.0), (-1.0, -15.0, -3.0)])
def test_moved_defective_frame_is_consistent_with_its_pair(
    template: np.ndarray, inspected: np.ndarray, angle: float, dx: float, dy: float
) -> None:
    """The defective board, moved by a known motion, registers to that motion composed with the pair's own mapping, at
    the board's structure (DeepPCB's scans differ from their templates by more than a rigid move: a scale, a shear and
    local warps of 1-2 px, which the mapping follows; the moved board is resampled, so the two fits agree to within
    reading noise, not exactly)."""
    pair = register(template, inspected)[1].mapping
    motion = _rigid(inspected.shape, angle, dx, dy)
    _, reg = register(template, _move(inspected, motion))
    assert reg.ok
    xs, ys = _structure(template)
    px, py = pair.to_frame(xs, ys)
    qx, qy = reg.mapping.to_frame(xs, ys)
    moved = motion[:, :2] @ np.stack([px, py]) + motion[:, 2:]
    error = np.hypot(qx - moved[0], qy - moved[1])
    assert np.median(error) < 0.1 and np.percentile(error, 95) < 1.0


@pytest.mark.parametrize("board", ["50600000", "92000000"])
def test_aligned_real_pair_registers_better_than_as_given(board: str) -> None:
    """A DeepPCB pair (aligned by its makers to a few pixels) is registered at least as well as it is given: fewer
    differing pixels and slivers than the pair as given (``check_pair``), the golden image hardly moved."""
    reference, image = _read(f"{board}_temp.jpg"), _read(f"{board}_test.jpg")
    warped, reg = register(reference, image)
    given = check_pair(reference, image)
    assert reg.ok and reg.score > 0.95 and abs(reg.angle_deg) < 0.1
    assert reg.slivers <= given.slivers
    inner = (slice(20, -20), slice(20, -20))
    assert np.abs(warped[inner].astype(int) - image[inner]).mean() < np.abs(reference[inner].astype(int) - image[inner]).mean()
    xs, ys = _structure(reference)
    qx, qy = reg.mapping.to_frame(xs, ys)
    assert np.median(np.hypot(qx - xs, qy - ys)) < 1.5  # hardly moved


def test_seed_is_used_and_a_wrong_seed_is_corrected(template: np.ndarray) -> None:
    truth = _rigid(template.shape, 1.0, 14.0, -9.0)
    frame = _move(template, truth)
    _, seeded = register(template, frame, init=truth)
    assert seeded.ok and _probe_error(seeded.matrix, truth, template.shape) < 0.1
    _, off = register(template, frame, init=_rigid(template.shape, 0.0, -10.0, 15.0))  # 30 px off: phase correlation finds it
    assert off.ok and _probe_error(off.matrix, truth, template.shape) < TOL_PX


def test_reference_of_another_size(template: np.ndarray) -> None:
    x0, y0, w, h = 40, 60, 560, 500
    crop = template[y0 : y0 + h, x0 : x0 + w].copy()
    warped, reg = register(
        crop, template, RegisterConfig(min_overlap=0.5, max_shift=80.0)
    )  # smaller reference: lands at (x0, y0), the rest is border
    assert reg.ok and warped.shape == template.shape
    assert _probe_error(reg.matrix, np.array([[1.0, 0, x0], [0, 1, y0]]), crop.shape) < TOL_PX
    assert (warped[:, : x0 - 2] == FILL_VALUE).all() and (warped[y0 + h + 2 :, :] == FILL_VALUE).all()
    np.testing.assert_array_less(np.abs(warped[y0 + 2 : y0 + h - 2, x0 + 2 : x0 + w - 2].astype(int) - crop[2:-2, 2:-2]), 3)
    warped, reg = register(template, crop, RegisterConfig(max_shift=80.0))  # larger reference: warped into the crop's frame
    assert reg.ok and warped.shape == crop.shape
    assert _probe_error(reg.matrix, np.array([[1.0, 0, -x0], [0, 1, -y0]]), template.shape) < TOL_PX
    _, reg = register(crop, template)  # by default a golden image must cover 85% of the frame: the rest would go uninspected
    assert not reg.ok and "golden image covers only 68% of the frame (needs 85%; register.min_overlap)" in reg.reason


def test_sparse_board_with_a_large_defect_stays_aligned() -> None:
    """Little structure and a large defect (a short across the pads): least squares drifts toward the defect (about
    1.2 px here); the refinement must not be kept when it lowers the score."""
    reference = np.full((640, 640), 255, np.uint8)
    for y in (150, 270, 390):
        cv2.circle(reference, (0, y), 40, 0, -1)
    cv2.rectangle(reference, (0, 500), (25, 560), 0, -1)
    image = reference.copy()
    cv2.polylines(image, [np.array([[30, 130], [70, 150], [75, 400], [30, 420]])], False, 0, 16)
    off = RegisterConfig(max_spread=1.0, max_tracks=1e9, max_slivers=1.0, max_missing=1e9)  # the golden check off: alignment alone
    _, reg = register(reference, image, off)
    assert reg.ok and _probe_error(reg.matrix, np.eye(2, 3), image.shape) < TOL_PX


def test_warped_reference_follows_the_matrix_with_border_fill(template: np.ndarray) -> None:
    truth = _rigid(template.shape, -1.0, 18.0, 7.0)
    warped, reg = register(template, _move(template, truth))
    expected = _move(template, reg.matrix)
    assert np.abs(warped.astype(int) - expected.astype(int)).max() <= 1
    assert FILL_VALUE == 114 and (warped[:, :10] == 114).all()  # shifted right by 18 px: the left strip has no reference


def _misfit(template: np.ndarray, case: str) -> np.ndarray:
    if case == "other board":
        return _read("92000000_test.jpg")
    if case == "rotated 90":
        return cv2.rotate(template, cv2.ROTATE_90_CLOCKWISE)
    if case == "upside down":
        return cv2.rotate(template, cv2.ROTATE_180)
    if case == "flipped":
        return np.ascontiguousarray(template[::-1])
    if case == "inverted":
        return 255 - template
    if case == "noise":
        return np.random.default_rng(0).integers(0, 256, template.shape, dtype=np.uint8)
    if case == "shifted 150 px":
        return _move(template, _rigid(template.shape, 0.0, 150.0, 0.0))
    return np.full(template.shape, 200, np.uint8)  # blank


@pytest.mark.parametrize(
    "case,why",
    [
        ("other board", "min_score"),
        ("rotated 90", "min_score"),
        ("upside down", "min_score"),
        ("flipped", "max_shift"),  # its best match (ZNCC ~0.6, repeated pattern) lies 200 px away
        ("inverted", "min_score"),
        ("noise", "min_score"),
        ("shifted 150 px", "max_shift"),
        ("blank", "frame is blank"),
    ],
)
def test_reference_that_does_not_fit_is_reported_not_raised(template: np.ndarray, case: str, why: str) -> None:
    warped, reg = register(template, _misfit(template, case))
    assert not reg.ok and why in reg.reason, reg
    if why == "min_score":
        assert reg.score < 0.35  # well below the default threshold, not a borderline call
    assert warped.shape == template.shape and warped.dtype == np.uint8


def test_motion_and_overlap_limits(template: np.ndarray) -> None:
    rotated = _move(template, _rigid(template.shape, 3.0, 0.0, 0.0))
    assert register(template, rotated)[1].ok
    _, reg = register(template, rotated, RegisterConfig(max_angle=2.0))
    assert not reg.ok and "max_angle" in reg.reason and reg.angle_deg == pytest.approx(-3.0, abs=0.02)
    patch = template[220:420, 220:420].copy()  # covers 10% of the frame
    _, reg = register(patch, template, RegisterConfig(max_shift=250.0))
    assert not reg.ok and "min_overlap" in reg.reason and reg.overlap == pytest.approx(0.1, abs=0.01)
    _, reg = register(patch, template, RegisterConfig(min_overlap=0.05))  # a golden image 440 px smaller: another scale
    assert not reg.ok and "not captured at the frame's scale" in reg.reason
    _, reg = register(patch, template, RegisterConfig(min_overlap=0.05, max_shift=250.0))
    assert reg.ok and _probe_error(reg.matrix, np.array([[1.0, 0, 220], [0, 1, 220]]), patch.shape) < TOL_PX


def test_other_boards_templates_do_not_fit_each_others_images() -> None:
    for ref_board, img_board in (("50600017", "92000030"), ("92000061", "50600033"), ("50600046", "92000099")):
        _, reg = register(_read(f"{ref_board}_temp.jpg"), _read(f"{img_board}_test.jpg"))
        assert not reg.ok and reg.score < RegisterConfig().min_score, (ref_board, img_board, reg)


def test_registrar_reuses_then_reregisters_when_the_frame_moves(template: np.ndarray, inspected: np.ndarray) -> None:
    registrar = Registrar(template)
    first_warped, first = registrar(inspected)
    assert first.ok and not first.reused
    again_warped, again = registrar(inspected.copy())
    assert again.reused and again.ok
    np.testing.assert_array_equal(again.matrix, first.matrix)
    np.testing.assert_array_equal(again_warped, first_warped)
    assert again.score == pytest.approx(first.score, abs=1e-6)
    motion = _rigid(inspected.shape, 0.0, 1.5, -1.0)
    _, moved = registrar(_move(inspected, motion))  # 1.8 px: the score hardly drops, but the coarse step sees the motion
    assert moved.ok and not moved.reused
    pair = np.vstack([first.matrix, [0, 0, 1]])
    assert _probe_error(moved.matrix, motion @ pair, template.shape) < TOL_PX
    assert registrar(_move(inspected, motion))[1].reused  # the new matrix is cached in turn


def test_registrar_sub_pixel_change_and_reuse_off(template: np.ndarray, inspected: np.ndarray) -> None:
    registrar = Registrar(template)
    registrar(inspected)
    assert registrar(_move(inspected, _rigid(inspected.shape, 0.0, 0.2, 0.0)))[1].reused  # within reuse_shift
    fixed = Registrar(template, RegisterConfig(reuse=False))
    assert [fixed(inspected)[1].reused for _ in range(3)] == [False, False, False]


def test_registrar_misfit_is_not_cached_and_reference_per_call(template: np.ndarray, inspected: np.ndarray) -> None:
    registrar = Registrar(template)
    registrar(inspected)
    frame = _read("92000000_test.jpg")
    _, bad = registrar(frame)
    assert not bad.ok and not bad.reused
    assert registrar(inspected)[1].reused  # the last good matrix survived the misfit
    other = _read("92000000_temp.jpg")
    _, reg = registrar(frame, reference=other)  # a new reference drops the cache
    assert reg.ok and not reg.reused
    assert registrar(frame, reference=other.copy())[1].reused  # equal content: the same reference
    registrar.reset()
    assert not registrar(frame)[1].reused
    shifted = _move(other, _rigid(other.shape, 0.0, 5.0, 0.0))  # another golden image of this board, 5 px to the right
    _, moved = registrar(frame, reference=shifted)
    assert moved.ok and not moved.reused
    assert moved.matrix[0, 2] == pytest.approx(reg.matrix[0, 2] - 5.0, abs=0.3)
    with pytest.raises(ValueError, match="Registrar: no reference"):
        Registrar()(inspected)


def test_matrix_to_shift_angle() -> None:
    shift, angle = matrix_to_shift_angle(_rigid((480, 640), 1.5, 3.0, -4.0), (480, 640), (480, 640))
    assert shift == pytest.approx(5.0) and angle == pytest.approx(-1.5)
    shift, _ = matrix_to_shift_angle(np.array([[1.0, 0, 20], [0, 1, 10]]), (100, 100), (120, 140))  # centred: no shift
    assert shift == pytest.approx(0.0)


@pytest.mark.parametrize(
    "reference,image,match",
    [
        (np.zeros((64, 64), np.float32), np.zeros((64, 64), np.uint8), r"reference: expected a non-empty uint8 \[H, W\].*float32"),
        (np.zeros((64, 64), np.uint8), np.zeros((64, 64, 3), np.uint8), r"image: expected .* shape \(64, 64, 3\)"),
        (np.zeros((64, 64), np.uint8), np.zeros((0, 64), np.uint8), r"image: expected a non-empty .* shape \(0, 64\)"),
        ([[0, 1], [2, 3]], np.zeros((64, 64), np.uint8), r"reference: expected .* got list"),
        (np.zeros((20, 64), np.uint8), np.zeros((64, 64), np.uint8), r"reference: 64x20 px is too small for register.scale 0.25"),
    ],
)
def test_bad_inputs_raise(reference: object, image: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        register(reference, image)  # type: ignore[arg-type]


def test_bad_seed_raises(template: np.ndarray) -> None:
    with pytest.raises(ValueError, match=r"init: expected a 2x3 \(or 3x3\) matrix, got shape \(3,\)"):
        register(template, template, init=np.zeros(3))


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("min_score", 1.5, r"register.min_score: must be in \[-1, 1\], got 1.5"),
        ("max_shift", 0.0, r"register.max_shift: must be > 0 or null, got 0.0"),
        ("max_angle", 200.0, r"register.max_angle: must be in \(0, 180\]"),
        ("min_overlap", 0.0, r"register.min_overlap: must be in \(0, 1\], got 0.0"),
        ("scale", 1.5, r"register.scale: must be in \(0, 1\], got 1.5"),
        ("levels", 0, r"register.levels: must be >= 1, got 0"),
        ("levels", 4, r"register.levels: must keep the finest scale .* <= 1, got 4"),
        ("iterations", 2.5, r"register.iterations: must be an integer, got 2.5"),
        ("eps", -1.0, r"register.eps: must be > 0"),
        ("blur", -0.5, r"register.blur: must be >= 0"),
        ("reuse", "yes", r"register.reuse: must be true or false, got 'yes'"),
        ("reuse_margin", 3.0, r"register.reuse_margin: must be in \[0, 2\], got 3.0"),
        ("reuse_shift", -1.0, r"register.reuse_shift: must be >= 0"),
        ("max_spread", 1.5, r"register.max_spread: must be in \[0, 1\], got 1.5"),
        ("max_tracks", -1.0, r"register.max_tracks: must be >= 0 \(per 640x640 px\), got -1.0"),
        ("max_slivers", -0.1, r"register.max_slivers: must be in \[0, 1\], got -0.1"),
    ],
)
def test_config_validation_names_the_field(template: np.ndarray, field: str, value: object, match: str) -> None:
    with pytest.raises(ConfigError, match=f"^{match}") as info:  # at construction: no bad config reaches register()
        RegisterConfig(**{field: value})
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match=r"^register\.bogus: unknown key \(known: blur, eps, "):
        RegisterConfig(bogus=1)
    assert RegisterConfig(max_shift=80) == RegisterConfig(max_shift=80.0)  # an integer where a number is asked for


def test_an_occluder_is_named_not_called_another_design(template: np.ndarray, inspected: np.ndarray) -> None:
    """Issue 36: a hand over 40% of the board is one region unlike the golden image; the reason says what was measured."""
    hand = inspected.copy()
    hand[100:505, 100:505] = 160
    _, reg = register(template, hand)
    assert not reg.ok and reg.reason.startswith("occluded or not this board: 42% of the frame unlike the golden image in one region")
    assert "another design" not in reg.reason


def test_covered_area_of_a_moved_golden_image(template: np.ndarray, inspected: np.ndarray) -> None:
    moved = _move(template, _rigid(template.shape, 0.0, 40.0, 0.0))
    _, reg = register(moved, inspected)
    covered = reg.covered(inspected.shape)
    assert reg.ok and reg.reference_shape == template.shape
    assert not covered[:, -40:].any()  # the strip the golden image left has no data
    assert covered[20:-20, 20:590].all()  # within the pair's own local warp (1-2 px) of the frame's edges, all covered


def test_the_old_area_limit_is_refused_by_name() -> None:
    """Issue 43: ``register.max_difference`` limited nothing since issue 35 and is gone; a config naming it fails at
    start, naming the key."""
    with pytest.raises(ConfigError, match=r"register\.max_difference"):
        RegisterConfig(max_difference=0.016)
