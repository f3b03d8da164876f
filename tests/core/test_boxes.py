import torch
from hypothesis import given
from hypothesis import strategies as st

from defect_detector.core.boxes import ltrb_to_xyxy, xyxy_to_ltrb

coords = st.floats(min_value=0, max_value=2000, allow_nan=False)


def _box(a: float, b: float, c: float, d: float) -> torch.Tensor:
    return torch.tensor([[min(a, c), min(b, d), max(a, c) + 1, max(b, d) + 1]], dtype=torch.float64)


@given(coords, coords, coords, coords)
def test_ltrb_round_trips(a: float, b: float, c: float, d: float) -> None:
    box = _box(a, b, c, d)
    point = torch.tensor([[(box[0, 0] + box[0, 2]) / 2, (box[0, 1] + box[0, 3]) / 2]], dtype=torch.float64)
    torch.testing.assert_close(ltrb_to_xyxy(xyxy_to_ltrb(box, point), point), box)


def test_known_answers() -> None:
    box = torch.tensor([[10.0, 20.0, 30.0, 60.0]])
    assert xyxy_to_ltrb(box, torch.tensor([[15.0, 30.0]])).tolist() == [[5.0, 10.0, 15.0, 30.0]]
    assert ltrb_to_xyxy(torch.tensor([[5.0, 10.0, 15.0, 30.0]]), torch.tensor([[15.0, 30.0]])).tolist() == box.tolist()
