"""Smoke test of benchmarks/bench_fusion.py on small models: the timed per-frame part is the siamese model's computation."""

from pathlib import Path

import torch
from small_checkpoint import write_small_checkpoint

from benchmarks.bench_fusion import CachedFrame, run
from defect_detector.export import DeployModel
from defect_detector.model.checkpoint import load_checkpoint


def test_cached_frame_gives_the_whole_pass_outputs(tmp_path: Path, one_thread: None) -> None:
    path = write_small_checkpoint(tmp_path / "s.pt", 64, randomize_bn=True, in_channels=2, model={"fusion": "siamese"})
    deploy = DeployModel(load_checkpoint(path).model, 64).eval()
    x = torch.rand(2, 2, 64, 64)
    with torch.no_grad():
        want = deploy(x)
        c3, c4 = deploy.model.golden_features(x[:, 1:2])
        got = CachedFrame(deploy)(x[:, :1], c3, c4)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_run_times_each_candidate_and_the_cached_part(tmp_path: Path, one_thread: None) -> None:
    early = write_small_checkpoint(tmp_path / "early.pt", 64, in_channels=2)
    siamese = write_small_checkpoint(tmp_path / "siamese.pt", 64, in_channels=2, model={"fusion": "siamese"})
    result = run([str(early), str(siamese)], imgsz=64, threads=1, iters=3)
    rows = result["rows"]
    assert list(rows) == ["early", "siamese", "siamese_cached"]
    assert rows["siamese_cached"]["gflops"] < rows["siamese"]["gflops"]
    assert rows["early"]["ratio_to_early"] == 1.0 and rows["siamese_cached"]["median_ms"] > 0
