"""Multi-design board streams for the drift benchmark, and the layer statistics of their frames through the pipeline.

A *board* is one image of a COCO json with its golden image (``reference`` entry); its *design* is the folder it
lies in (DeepPCB: ``<group>/<design>/<id>_test.jpg``). A stream takes the boards design by design, in runs of 10-60
frames (``RUN_LENGTHS``), the designs in a random order (never the same one twice in a row), each design's boards in
file order from where its last run stopped. Large frames compose 6 boards of one run into a 2048x1536 frame (3 x 2
grid, dark surround), their golden images likewise, and go through the pipeline tiled as ``predict`` tiles them.

Statistics are computed once per distinct board (or large frame) and variant (clean, or a simulated camera fault of
``monitor/faults.py`` applied to the frame as the camera delivers it, the golden image left as stored), through
:class:`~defect_detector.inspect.pipeline.Pipeline` exactly as ``predict`` runs: gray frame, golden image registered
into the faulted frame, letterboxed or tiled, pooled statistics. A frame whose golden image does not register is
not inspected (its statistics are NaN, which the monitor leaves out, as ``predict`` skips the frame). For a
golden-template model the golden image's own statistics (paired with itself, registered as for the clean frame) are
computed too: the monitor reads the frame relative to them.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from defect_detector.core.config import MonitorConfig
from defect_detector.core.errors import ReferenceError
from defect_detector.core.frame import Frame
from defect_detector.core.io import atomic_write_json
from defect_detector.data.images import load_image_gray
from defect_detector.inspect.designs import Designs
from defect_detector.inspect.pipeline import Pipeline
from defect_detector.inspect.prepare import Prepare
from defect_detector.monitor.faults import apply_fault
from defect_detector.screens.blank import image_levels

RUN_LENGTHS = (10, 60)
"""Frames per design run, inclusive range."""

LARGE_SIZE = (1536, 2048)
LARGE_GRID = (2, 3)
BOARDS_PER_LARGE = LARGE_GRID[0] * LARGE_GRID[1]

STRONG = {"defocus": 2.0, "contrast_loss": 0.6, "lighting_drop": 0.6, "salt_and_pepper": 0.02}
MILD = {"defocus": 1.0, "contrast_loss": 0.8, "lighting_drop": 0.8}
VARIANTS: dict[str, tuple[str, float] | None] = {
    "clean": None,
    **{name: (name, s) for name, s in STRONG.items()},
    **{f"{name}_mild": (name, s) for name, s in MILD.items()},
}
"""Variant name -> (fault, strength), None for the clean frame."""


@dataclass(frozen=True)
class Board:
    """One board: its image and golden image files, and its design (the folder it lies in)."""

    image: str
    golden: str | None
    design: str


def coco_boards(ann_file: str | Path) -> list[Board]:
    """The boards of a COCO json in image-id order (``info.images_root`` relative to the json, as ``convert`` writes)."""
    path = Path(ann_file)
    raw = json.loads(path.read_text(encoding="utf-8"))
    root = (path.parent / raw.get("info", {}).get("images_root", ".")).resolve()
    out = []
    for entry in sorted(raw["images"], key=lambda e: e["id"]):
        golden = entry.get("reference")
        out.append(Board(str(root / entry["file_name"]), str(root / golden) if golden else None, str(Path(entry["file_name"]).parent)))
    return out


def design_stream(boards: Sequence[Board], length: int, seed: int, runs: tuple[int, int] = RUN_LENGTHS) -> list[int]:
    """``length`` indices into ``boards``: design runs of ``runs`` frames in a random order of designs (seeded), each
    design's boards in file order, a design's next run continuing where its last one stopped (cycling)."""
    by_design: dict[str, list[int]] = {}
    for i, board in enumerate(boards):
        by_design.setdefault(board.design, []).append(i)
    designs = sorted(by_design)
    rng = np.random.default_rng(seed)
    cursor = {d: int(rng.integers(len(by_design[d]))) for d in designs}
    out: list[int] = []
    last = None
    while len(out) < length:
        design = designs[int(rng.integers(len(designs)))]
        if design == last and len(designs) > 1:
            continue
        last = design
        for _ in range(int(rng.integers(runs[0], runs[1] + 1))):
            members = by_design[design]
            out.append(members[cursor[design] % len(members)])
            cursor[design] += 1
    return out[:length]


def design_changes(boards: Sequence[Board], stream: Sequence[int]) -> list[int]:
    """Frames of ``stream`` where the design differs from the frame before."""
    return [t for t in range(1, len(stream)) if boards[stream[t]].design != boards[stream[t - 1]].design]


def compose(images: Sequence[np.ndarray], size: tuple[int, int] = LARGE_SIZE, grid: tuple[int, int] = LARGE_GRID) -> np.ndarray:
    """Up to ``rows x cols`` uint8 ``[h, w]`` boards in a grid, centred on a dark ``size`` frame (uint8 ``[H, W]``)."""
    rows, cols = grid
    h, w = images[0].shape
    out = np.zeros(size, np.uint8)
    top, left = (size[0] - rows * h) // 2, (size[1] - cols * w) // 2
    for k, image in enumerate(images[: rows * cols]):
        r, c = divmod(k, cols)
        out[top + r * h : top + (r + 1) * h, left + c * w : left + (c + 1) * w] = image[:h, :w]
    return out


def large_frames(boards: Sequence[Board], count: int, seed: int) -> list[list[int]]:
    """``count`` large frames, each 6 consecutive boards of one design run (a stream of ``6 * count`` boards)."""
    stream = design_stream(boards, BOARDS_PER_LARGE * count, seed, (BOARDS_PER_LARGE * 2, BOARDS_PER_LARGE * 10))
    return [stream[k : k + BOARDS_PER_LARGE] for k in range(0, len(stream), BOARDS_PER_LARGE)]


class StatsCollector:
    """Pooled layer statistics of frames through ``pipeline`` (``--threads`` set by the caller)."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self.designs = Designs(None, pipeline.limits.register)
        self.reference = pipeline.runtime.channels == 2
        self.num_layers = len(pipeline.runtime.layer_names)

    def _nan(self) -> np.ndarray:
        return np.full((self.num_layers, 2), np.nan)

    def frame(self, image: np.ndarray, golden: np.ndarray | None, variants: dict[str, tuple[str, float] | None], seed: int) -> dict:
        """``{variant: float64 [L, 2], "levels_<variant>": float64 [4]}`` for one frame (``golden`` unregistered;
        ``"golden"`` added for a reference model: the golden image registered for the clean frame, paired with itself)."""
        out: dict[str, np.ndarray] = {}
        frames, goldens, names = [], [], []
        for name, fault in variants.items():
            faulted = image if fault is None else apply_fault(image, fault[0], fault[1], seed)
            out[f"levels_{name}"] = image_levels(faulted)
            warped = None
            if self.reference:
                try:
                    warped = self.designs.register(self.designs.of(name, golden)[0], faulted, name)[0]
                except ReferenceError:
                    out[name] = self._nan()
                    continue
            frames.append(faulted)
            goldens.append(warped)
            names.append(name)
        if self.reference and "clean" in names:
            warped = goldens[names.index("clean")]
            out["levels_golden"] = image_levels(warped)
            frames.append(warped)
            goldens.append(warped)
            names.append("golden")
        elif self.reference:
            out["golden"], out["levels_golden"] = self._nan(), np.full(4, np.nan)
        if frames:
            results = self.pipeline.detect(frames, goldens if self.reference else None)
            out.update({n: r.stats.double().numpy() for n, r in zip(names, results)})
        return out

    def boards(self, boards: Sequence[Board], variants: dict, desc: str, progress: bool = True) -> dict[str, np.ndarray]:
        """``{variant: [N, L, 2]}`` (and ``"golden"``) for each board, faults seeded by board index."""
        rows = []
        for i, board in enumerate(tqdm(boards, desc=desc, unit="board", disable=not progress, leave=False)):
            golden = load_image_gray(board.golden) if self.reference and board.golden else None
            rows.append(self.frame(load_image_gray(board.image), golden, variants, i))
        return {k: np.stack([r[k] for r in rows]) for k in rows[0]}

    def large(
        self,
        boards: Sequence[Board],
        frames: Sequence[Sequence[int]],
        variants: dict,
        desc: str,
        progress: bool = True,
        size: tuple[int, int] = LARGE_SIZE,
    ) -> dict[str, np.ndarray]:
        """``{variant: [M, L, 2]}`` (and ``"golden"``) for composed large frames (:func:`large_frames`)."""
        cache: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}

        def read(i: int) -> tuple[np.ndarray, np.ndarray | None]:
            if i not in cache:
                board = boards[i]
                cache[i] = (load_image_gray(board.image), load_image_gray(board.golden) if self.reference and board.golden else None)
            return cache[i]

        rows = []
        for k, members in enumerate(tqdm(frames, desc=desc, unit="frame", disable=not progress, leave=False)):
            parts = [read(i) for i in members]
            golden = compose([g for _, g in parts], size) if self.reference else None
            rows.append(self.frame(compose([im for im, _ in parts], size), golden, variants, k))
        return {k: np.stack([r[k] for r in rows]) for k in rows[0]}


def calibration_split(train: Sequence[Board], count: int) -> tuple[list[int], list[int]]:
    """(the ``count`` boards ``calibrate --max-images count`` takes from ``train``, evenly spaced; the rest)."""
    from defect_detector.jobs.calibrate import evenly_spaced

    chosen = evenly_spaced(len(train), count)
    taken = set(chosen)
    return chosen, [i for i in range(len(train)) if i not in taken]


def collect(
    pipeline: Pipeline,
    calibration: Sequence[Board],
    pool: Sequence[Board],
    large: Sequence[Sequence[int]],
    large_faults: bool = False,
    progress: bool = True,
    large_size: tuple[int, int] = LARGE_SIZE,
) -> dict[str, np.ndarray]:
    """Every statistic the benchmark streams: ``calib_<variant>`` of the calibration boards (clean, golden, and the
    simulated faults ``calibrate`` stores, computed by its own :func:`fault_statistics`), ``pool_<variant>`` of the
    stream boards (:data:`VARIANTS`, golden), ``large_<variant>`` of the composed large frames (clean, golden, and
    with ``large_faults`` the strong faults)."""
    from defect_detector.jobs.calibrate import evenly_spaced, fault_statistics

    collector = StatsCollector(pipeline)
    out = {f"calib_{k}": v for k, v in collector.boards(calibration, {"clean": None}, "calibration", progress).items()}
    framed = Pipeline(pipeline.runtime, golden_view=False)  # the statistics this benchmark streams are the frame view's
    prepare, records = Prepare(framed, collector.designs), []
    for i in evenly_spaced(len(calibration), 64):
        image = load_image_gray(calibration[i].image)
        golden = load_image_gray(calibration[i].golden) if collector.reference else None
        record = prepare(Frame(i, image, "calibration", calibration[i].image, 0.0), golden)
        records += [] if record.refused else [record]
    for name, values in fault_statistics(framed, records, 8, progress).items():
        out[f"calib_faults_{name}"] = values
    out.update({f"pool_{k}": v for k, v in collector.boards(pool, VARIANTS, "stream boards", progress).items()})
    if large:
        large_variants = {"clean": None, **({name: (name, s) for name, s in STRONG.items()} if large_faults else {})}
        out.update({f"large_{k}": v for k, v in collector.large(pool, large, large_variants, "large frames", progress, large_size).items()})
    return out


def add_run_arguments(parser: argparse.ArgumentParser, out: str) -> None:
    """The flags every drift benchmark shares: ``--monitor-config``, ``--threads``, ``--cache``, ``--out`` (default ``out``)
    and ``--quiet``."""
    parser.add_argument("--monitor-config", help="YAML with drift settings (default: MonitorConfig defaults)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--cache", default="data/deeppcb/drift_cache", help="statistics cache folder (git-ignored; '' for none)")
    parser.add_argument("--out", default=out, help="JSON results")
    parser.add_argument("--quiet", action="store_true")


def monitor_config(args: argparse.Namespace) -> MonitorConfig:
    """The drift settings ``--monitor-config`` names, else :class:`MonitorConfig`'s defaults."""
    from defect_detector.monitor.setup import load_monitor_config

    return load_monitor_config(args.monitor_config) if args.monitor_config else MonitorConfig()


def write_results(path: str, cfg: MonitorConfig, results: dict) -> None:
    """``{"monitor_config", "models": results}`` as JSON at ``path`` (atomically; numpy numbers as floats)."""
    atomic_write_json(path, json.loads(json.dumps({"monitor_config": cfg.model_dump(), "models": results}, default=float)))
