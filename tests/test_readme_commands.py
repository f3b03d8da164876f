"""Every command the README and the docs show parses with the real CLI, names repository files that exist or that an
earlier command of the README (or of the same page) writes, and the cheap ones run as written (issue 33, item 9).

Commands are the lines of the ```bash blocks (a trailing backslash joins lines; ``#`` starts a comment). A
``defect-detector SUB ...`` line (or ``torchrun ... -m defect_detector.cli.main SUB ...``) must parse with the CLI's
own parser; ``python -m benchmarks.NAME`` must name a module that exists. Repository paths are the arguments (and the
values of ``key=value`` overrides) under ``data/``, ``configs/``, ``defect_detector/weights/``, ``docs/`` or
``deploy/``: each must exist, be written by an earlier command (``--out``: a file or a folder, with ``convert
--val-groups``'s ``_train`` / ``_val`` siblings; ``cp A B``: ``B``), or be the line's own data that
``configs/default.yaml`` names (``data.train`` / ``data.val``: what the README tells you to bring). ``predict`` lines
whose source is shipped run for real, their outputs moved under a temporary folder.
"""

from __future__ import annotations

import argparse
import re
import shlex
import uuid
from pathlib import Path

import pytest
import yaml

from defect_detector.cli.main import COMMANDS, main
from defect_detector.cli.parser import build_parser, parse_args

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "deploy" / "README.md"]
REPO_PREFIXES = ("data/", "configs/", "defect_detector/weights/", "docs/", "deploy/")
OUTPUT_OPTIONS = ("--save-json", "--save-dir", "--report", "--out", "--alerts", "--plots", "--gallery")
CLI_MODULE = "defect_detector.cli.main"


def commands(page: Path) -> list[list[str]]:
    """The command lines of ``page``'s ```bash blocks, each split like a shell would (comments dropped)."""
    blocks = re.findall(r"^```bash\n(.*?)^```", page.read_text(), re.S | re.M)
    out = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                out.append(words)
    return out


def cli_args(words: list[str]) -> list[str] | None:
    """The arguments given to ``defect-detector`` on a command line, or None when it does not run the CLI."""
    if words[0] == "defect-detector":
        return words[1:]
    if words[0] == "torchrun" and CLI_MODULE in words:
        return words[words.index(CLI_MODULE) + 1 :]
    return None


def _written(args: argparse.Namespace, words: list[str]) -> set[str]:
    """What one command writes, as repository-relative paths (a folder ends with ``/``)."""
    written = set()
    if words[0] == "cp" and len(words) == 3:
        written.add(words[2])
    out = getattr(args, "out", None) if args is not None else None
    if isinstance(out, str):
        written.add(out if "." in Path(out).name else out.rstrip("/") + "/")
        if getattr(args, "command", None) == "convert" and getattr(args, "val_groups", None):
            stem = Path(out)
            written |= {str(stem.with_name(f"{stem.stem}_{part}.json")) for part in ("train", "val")}
    return written


def _repo_paths(words: list[str]) -> list[str]:
    values = [w.split("=", 1)[1] if "=" in w and not w.startswith("-") else w for w in words[1:]]
    return [v for v in values if v.startswith(REPO_PREFIXES)]


def _yours() -> set[str]:
    """The line's own data, which configs/default.yaml names and the README tells you to point it at."""
    data = yaml.safe_load((ROOT / "configs" / "default.yaml").read_text())["data"]
    return {data["train"], data["val"]}


def _known(path: str, written: set[str]) -> bool:
    if (ROOT / path).exists() or path in written or path.rstrip("/") + "/" in written or path in _yours():
        return True
    return any(w.endswith("/") and path.startswith(w) for w in written)


def check_page(page: Path, written: set[str]) -> list[str]:
    """Problems with ``page``'s commands (one line each); adds what they write to ``written``."""
    parser, problems = build_parser(COMMANDS), []
    for words in commands(page):
        args, line = None, " ".join(words)
        given = cli_args(words)
        if given is not None:
            try:
                args = parse_args(parser, given)
            except SystemExit:
                problems.append(f"{page.name}: does not parse: {line}")
        module = words[2] if words[:2] == ["python", "-m"] and len(words) > 2 else None
        if module and module.startswith("benchmarks.") and not (ROOT / (module.replace(".", "/") + ".py")).is_file():
            problems.append(f"{page.name}: no module {module}: {line}")
        writes = _written(args, words)  # what the command writes is no input of its own
        unknown = [p for p in _repo_paths(words) if not _known(p, written | writes)]
        problems += [f"{page.name}: {p} neither exists nor is written before: {line}" for p in unknown]
        written |= writes
    return problems


def test_every_readme_and_docs_command_parses_and_names_files_that_exist_or_are_written_before() -> None:
    readme_writes: set[str] = set()
    problems = check_page(PAGES[0], readme_writes)
    for page in PAGES[1:]:
        problems += check_page(page, set(readme_writes))
    assert problems == []
    assert {"data/deeppcb/deeppcb_train.json", "data/deeppcb/deeppcb_val.json"} <= readme_writes


def test_the_checker_finds_a_gone_subcommand_and_a_file_nothing_writes(tmp_path: Path) -> None:
    gone, written = f"data/{uuid.uuid4().hex}/val.json", f"data/{uuid.uuid4().hex}/all"  # in no checkout, whatever its data
    page = tmp_path / "page.md"
    page.write_text(
        f"```bash\ndefect-detector bench --weights best.pt\ndefect-detector val --data {gone}\n"
        f"defect-detector convert deeppcb PCBData --out {written}.json \\\n    --val-groups 1  # comment\n"
        f"defect-detector val --data {written}_val.json\n```\n"
    )
    problems = check_page(page, set())
    assert len(problems) == 2 and "does not parse: defect-detector bench" in problems[0], problems
    assert f"{gone} neither exists nor is written before" in problems[1]


def _shipped_predicts() -> list[list[str]]:
    """The distinct ``predict`` lines whose source (and golden images) ship with the repository."""
    seen, out = set(), []
    parser = build_parser(COMMANDS)
    for page in PAGES:
        for words in commands(page):
            given = cli_args(words)
            if not given or given[0] != "predict":
                continue
            args = parse_args(parser, given)
            shipped = (ROOT / args.source).exists() and (args.reference is None or (ROOT / args.reference).exists())
            if shipped and args.source.startswith("data/") and tuple(given) not in seen:
                seen.add(tuple(given))
                out.append(given)
    return out


@pytest.mark.parametrize("given", _shipped_predicts(), ids=" ".join)
def test_shipped_predict_commands_run_as_written(given: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    argv = [str(tmp_path / w) if i and given[i - 1] in OUTPUT_OPTIONS else w for i, w in enumerate(given)]
    assert main([*argv, "--device", "cpu", "--threads", "1"]) == 0
    for i, word in enumerate(given[:-1]):
        if word in OUTPUT_OPTIONS:
            assert (tmp_path / given[i + 1]).exists(), f"{word} {given[i + 1]} was not written"
