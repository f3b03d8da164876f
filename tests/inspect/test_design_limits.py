"""A taught design's own limits (``core/limits.py``, a taught entry's ``limits``) judge its frames, and its frames only."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from defect_detector.cli.main import main
from defect_detector.data.images import load_image_gray, pixel_fingerprint
from defect_detector.inspect.inspector import Inspector
from defect_detector.inspect.runtime import Runtime
from defect_detector.model.checkpoint import DEFAULT_REFERENCE_WEIGHTS, load_checkpoint

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"
DARK = {"exposure": {"min_light": 0.3, "min_contrast": 0.3}, "hidden_max_area": None}


def test_a_designs_own_exposure_limit_applies_to_its_frames_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Design A taught with its own exposure range and hidden-area limit (its line runs at half the light; a binarized
    design's dimmer board reads as a shadow against its golden image): A's board at half the light is inspected, read
    by both stages at A's limits; B's is refused as underexposed, as both are by the weights alone."""
    boards = sorted((SAMPLES / "deeppcb").glob("*.jpg"))[:2]
    dim = [(load_image_gray(b).astype(np.float64) * 0.5).astype(np.uint8) for b in boards]
    key_a = pixel_fingerprint(load_image_gray(SAMPLES / "golden" / boards[0].name))
    start = torch.load(DEFAULT_REFERENCE_WEIGHTS, map_location="cpu", weights_only=True)
    weights = tmp_path / "dark_a.pt"
    torch.save(start | {"taught": [{"name": boards[0].name, "key": key_a, "limits": DARK}]}, weights)
    runtime = Runtime.load(weights, device="cpu")
    assert set(runtime.design_limits) == {key_a} and runtime.limits.changed(runtime.design_limits[key_a]) == DARK
    assert main(["info", "--weights", str(weights)]) == 0
    assert [d["limits"] for d in json.loads(capsys.readouterr().out)["designs"]] == [DARK]
    assert runtime.design_limits[key_a].register == runtime.limits.register  # only what the design sets

    def inspect(path: Path) -> list:
        with Inspector.load(path, reference=SAMPLES / "golden", device="cpu", threads=1, monitor=False) as inspector:
            return [inspector.inspect(image, name=b.name) for b, image in zip(boards, dim)]

    plain, taught = inspect(DEFAULT_REFERENCE_WEIGHTS), inspect(weights)
    assert [r.verdict.value for r in plain] == ["not_inspected", "not_inspected"]
    assert all(r.reason.startswith("underexposed: ") for r in plain)
    assert taught[0].verdict.value in ("pass", "fail") and taught[1].reason == plain[1].reason


@pytest.mark.parametrize(
    ("limits", "words"),
    [({"exposure": {"min_lite": 0.3}}, "limits.exposure.min_lite: unknown key"), ({"hidden_max_area": 4}, "limits.hidden_max_area")],
)
def test_a_bad_design_limit_in_the_weights_is_one_line(tmp_path: Path, limits: dict, words: str) -> None:
    start = torch.load(DEFAULT_REFERENCE_WEIGHTS, map_location="cpu", weights_only=True)
    torch.save(start | {"taught": [{"name": "a.png", "key": "image:a", "limits": limits}]}, tmp_path / "bad.pt")
    with pytest.raises(ValueError) as caught:
        load_checkpoint(tmp_path / "bad.pt")
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'bad.pt'}: 'taught' entry of a.png: its {words}") and "\n" not in message
