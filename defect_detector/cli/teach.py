"""``defect-detector teach``: bring a new design in from its golden images and good boards (``jobs/teach.py``), or
apply the operators' rejections to taught weights (``--station``, ``jobs/rejections.py``)."""

from __future__ import annotations

import argparse
from typing import Any

from defect_detector.cli.errors import CliError


def add_parser(sub: Any) -> None:
    """The ``teach`` subcommand."""
    p = sub.add_parser(
        "teach",
        help="bring a new design in from its golden images and good boards: calibrate its own operating point on line "
        "captures of it, learn where good boards draw calls, fine-tune only when that pays; or apply the operators' "
        "rejections (--station)",
    )
    p.add_argument(
        "--golden",
        help="the design's golden image, or a folder of golden images (with --good: one image; left out, the golden image "
        "is built from the good boards)",
    )
    p.add_argument(
        "--good",
        metavar="DIR",
        help="5 or more good boards of one design as the line captures them: its tolerance map (where good boards draw "
        "calls, the score a call there must beat) is learnt from them and applied by predict to that design only",
    )
    p.add_argument(
        "--station",
        metavar="DB",
        help="apply the calls reviewers rejected at the station (its database URL or SQLite file) to the tolerance of each "
        "design taught in --weights: each rejected spot is quietened within 20 px (a call there must beat its score), "
        "nothing else is taught",
    )
    p.add_argument(
        "--forget-rejections",
        action="store_true",
        help="undo --station: write --weights again without any design's rejected places",
    )
    p.add_argument(
        "--area",
        metavar="MASK",
        help="the design's inspection area: a mask image of its golden image's size, non-zero on the board (default: the "
        "board's own area, found where a plain background lies round it); nothing outside it is called or refuses a frame",
    )
    p.add_argument("--weights", help="golden-template weights to start from (default: photo_ref.pt, trained on photographs too)")
    p.add_argument("--minutes", type=float, default=10.0, help="the whole command ends within this many minutes (default: 10)")
    p.add_argument("--out", required=True, help="the taught weights (.pt), which predict takes as they are")
    p.add_argument("--held", type=int, default=8, help="painted boards per golden image scored before and after (default: 8)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, help="torch CPU threads")


def _point(p: Any) -> str:
    return f"{p.caught:.1%} of painted defects caught, {p.false_calls:.2f} false calls per defect-free board (score >= {p.conf:.3f})"


def _captures(boards: dict[str, int]) -> str:
    """The captures the figures are over: all of them, or how many of each set were refused (not inspected) and so left out."""
    clean, held = boards["clean"], boards["held"]
    if not boards["clean_refused"] and not boards["held_refused"]:
        return f"{clean} defect-free and {held} painted line captures"
    return (
        f"{clean - boards['clean_refused']} of {clean} defect-free and {held - boards['held_refused']} of {held} painted line captures "
        f"({boards['clean_refused']} of {clean} and {boards['held_refused']} of {held} captures refused, not inspected: the figures "
        "below leave them out; the reasons are in the warnings above)"
    )


def _good(good: Any) -> str:
    """The good boards' lines: the tolerance map learnt, the design's point they set, and false calls per good board
    there without the map and with the map learnt on the other good boards (leave-one-out)."""
    n = len(good.inspected)
    refused = f" ({len(good.refused)} refused, not inspected: {', '.join(name for name, _ in good.refused)})" if good.refused else ""
    tol = good.tolerance
    places = f"{len(tol.places)} place{'' if len(tol.places) == 1 else 's'}"
    raised = "kept" if good.conf == good.captures else f"raised from {good.captures:.3f}"
    return (
        f"  good boards: {n} inspected{refused}; tolerance map: {places} (radius {tol.radius:g} px of the golden "
        f"image, margin {tol.margin:g})\n"
        f"    the design's point: score >= {good.conf:.3f} ({raised}: at most 0.1 false calls per good board held out from the map)\n"
        f"    false calls per good board at score >= {good.conf:.3f}: {good.per_board(good.conf, False):.2f} without the map, "
        f"{good.per_board(good.conf, True):.2f} with the map learnt on the other good boards (leave-one-out)\n"
        f"    painted defects on the good boards: {_painted(good)}\n"
        f"    {_capture(good.capture)}\n"
        f"    {_drift(good.drift)}"
    )


def _drift(level: Any) -> str:
    """The line of the design's own drift level (``monitor/design_drift.py``), or why it has none."""
    if level is None:
        return "drift level: the weights' calibration (a fine-tune calibrated its own, or the weights carry no drift baseline)"
    return f"drift level: the design's own, read on {level.boards} good boards (its frames are read against it, not the calibration's mean)"


def _capture(capture: Any) -> str:
    """The line of the range of capture the good boards showed (``jobs/teach_limits.py``): the limits they raised for
    the design, or that the weights' held them all."""
    if capture is None:
        return "capture range: not read"
    beyond = f"; {len(capture.beyond)} beyond even the caps, refused" if capture.beyond else ""
    raised = capture.raised()
    if not raised:
        return f"capture range: within the weights' limits{beyond}"
    words = ", ".join(f"{key} {old:g} -> {new:g}" for key, (old, new) in raised.items())
    return f"capture range: the design's own limits {words} (its good boards' largest readings x1.25, capped){beyond}"


def _painted(good: Any) -> str:
    caught, total = good.painted_caught(good.conf)
    if not total:
        return "none could be painted or inspected"
    share = f"{caught} of {total} ({caught / total:.1%})"
    return f"{share} caught at score >= {good.conf:.3f}, each board's against the map learnt on the others"


def _verdicts(args: argparse.Namespace) -> None:
    """``teach --station DB`` / ``--forget-rejections``: the operators' rejections applied to, or removed from, the
    taught weights (``jobs/rejections.py``)."""
    from defect_detector.jobs.rejections import apply_rejections, forget_rejections

    if args.golden is not None or args.good is not None:
        raise CliError("--station and --forget-rejections change taught weights only: leave --golden and --good out")
    if args.weights is None:
        raise CliError("--station and --forget-rejections need --weights: the taught weights to change")
    if args.forget_rejections:
        for name, places in forget_rejections(args.weights, args.out):
            print(f"  {name}: {places} rejected place(s) forgotten")
        print(f"wrote {args.out}")
        return
    report = apply_rejections(args.weights, args.station, args.out)
    for d in report.designs:
        capped = f"; {d.capped} scored 0.9 or more and stay calls" if d.capped else ""
        print(f"  {d.name}: {d.calls} rejected call(s) read, {d.places} rejected place(s) tolerated within 20 px{capped}")
    for key, calls in report.untaught.items():
        print(f"  not applied: {calls} rejected call(s) of design {key}, which these weights were not taught (teach it first)")
    print(f"wrote {report.weights} (undo: teach --forget-rejections --weights {report.weights} --out ...)")


def run(args: argparse.Namespace) -> None:
    from defect_detector.jobs.teach import check_minutes, teach

    if args.station is not None and args.forget_rejections:
        raise CliError("--station applies the operators' rejections and --forget-rejections removes them: give one")
    if args.station is not None or args.forget_rejections:
        _verdicts(args)
        return
    if args.held < 1:
        raise CliError(f"--held must be >= 1, got {args.held}")
    try:
        check_minutes(args.minutes)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if args.golden is None and args.good is None:
        raise CliError("teach needs --golden (the design's golden image), --good DIR (its good boards), or both")
    options = {"threads": args.threads, "good": args.good, "area": args.area, "started": getattr(args, "started", None)}
    report = teach(args.golden, args.out, args.weights, args.minutes, args.held, args.seed, **options)
    if report.good is not None and report.good.golden is not None:
        print(f"golden image built from the good boards (golden build: their median): {report.good.golden}, predict's --reference")
    print(f"teach: {len(report.designs)} golden image(s) in {report.minutes:.1f} min, on {_captures(report.boards)}:")
    for d in report.designs:
        if d.known:
            print(
                f"  {d.name}: taught at the weights' own point, nothing needed changing (its look lies within their training "
                "domain, where they were validated on real defects; the painted recall below is shown, not a gate)"
            )
        else:
            print(f"  {d.name}: {'taught' if d.taught else 'NOT taught (its frames keep their design warning)'}")
        if d.key in report.areas:
            share, source = report.areas[d.key]
            found = "your --area mask" if source == "mask" else "the board's edge in its golden image"
            print(f"    inspection area: {share:.0%} of its golden image ({found}); nothing outside is called or refuses a frame")
        print(f"    before (the weights' own point): {_point(d.before)}")
        print(f"    after  (its own point):          {_point(d.after)}")
    print(f"  {report.tuning}")
    if report.rehearsal is not None:
        print(f"  rehearsal boards (real DeepPCB defects): mAP@0.5 {report.rehearsal[0]:.3f} -> {report.rehearsal[1]:.3f}")
    if report.good is not None:
        print(_good(report.good))
    print(f"  {report.baseline}")
    print(f"wrote {report.weights} (the boards and any run: {report.work})")
