"""notebooks/quickstart.ipynb: saved without outputs, and runs headless end to end with tiny parameters."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
kernelspec = pytest.importorskip("ipykernel.kernelspec")

from jupyter_client.kernelspec import KernelSpecManager  # noqa: E402
from jupyter_client.manager import AsyncKernelManager  # noqa: E402

import defect_detector  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = REPO_ROOT / "notebooks" / "quickstart.ipynb"
CELL_TIMEOUT_S = 300  # generous: the machine may be busy with a training run
KERNEL_PROBE = "import sys\nprint('KERNEL_EXECUTABLE=' + sys.executable)"


def _read() -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOK, as_version=4)


def _tagged(nb: nbformat.NotebookNode, tag: str) -> nbformat.NotebookNode:
    cells = [c for c in nb.cells if tag in c.get("metadata", {}).get("tags", [])]
    assert len(cells) == 1, f"expected one cell tagged {tag!r}, found {len(cells)}"
    return cells[0]


def _text(cell: nbformat.NotebookNode) -> str:
    """Stream and text/plain output of a code cell."""
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif "data" in out:
            parts.append(out.data.get("text/plain", ""))
    return "".join(parts)


def _images(cell: nbformat.NotebookNode) -> int:
    return sum("image/png" in out.get("data", {}) for out in cell.get("outputs", []))


def _files(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if p.is_file()}


def test_notebook_is_saved_clean() -> None:
    nb = _read()
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, "no code cells"
    assert all(not c.outputs and c.execution_count is None for c in code), "save the notebook with outputs cleared"
    params = _tagged(nb, "parameters").source
    for name in ("WORK_DIR", "N_IMAGES", "IMG_SIZE", "EPOCHS", "TEACH_MINUTES"):
        assert f"{name} =" in params


def test_quickstart_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "work"
    nb = _read()
    _tagged(nb, "parameters").source = f"WORK_DIR = {str(work)!r}\nN_IMAGES = 6\nIMG_SIZE = 256\nEPOCHS = 2\nTEACH_MINUTES = 1.5\n"
    nb.cells.append(nbformat.v4.new_code_cell(KERNEL_PROBE))

    # The kernel inherits this environment; it starts in the repository root (resources below).
    monkeypatch.setenv("NO_ALBUMENTATIONS_UPDATE", "1")
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # tiny tensors: more threads only contend with other work
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "mpl"))
    # A kernelspec that runs this interpreter, whatever other "python3" kernels the machine has.
    kernels = tmp_path / "kernels"
    kernelspec.write_kernel_spec(kernels / "python3")
    km = AsyncKernelManager(kernel_name="python3", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernels)]))

    repo_before = _files(REPO_ROOT / "notebooks")
    client = nbclient.NotebookClient(nb, km=km, timeout=CELL_TIMEOUT_S, resources={"metadata": {"path": str(REPO_ROOT)}})
    client.execute()

    errors = [out for c in nb.cells for out in c.get("outputs", []) if out.output_type == "error"]
    assert not errors, errors
    assert f"KERNEL_EXECUTABLE={sys.executable}" in _text(nb.cells[-1])
    assert defect_detector.__version__ in _text(nb.cells[next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")])

    run_dir = work / "runs" / "quickstart"
    for path in ("weights/best.pt", "metrics.jsonl", "plots/curves.png", "plots/pr_curves.png"):
        assert (run_dir / path).is_file(), path
    assert (work / "quickstart.torchscript.pt").is_file()
    export = _tagged(nb, "export")
    assert "frame 2048x1536 (" in _text(export) and " tiles) -> " in _text(export) and _images(export) == 1

    drift = _tagged(nb, "drift")
    assert '"event": "drift"' in _text(drift)
    alerts = [json.loads(line) for line in (work / "alerts.jsonl").read_text().splitlines()]
    assert any(a["event"] == "drift" for a in alerts)
    assert _images(drift) == 1

    taught = _tagged(nb, "teach")
    assert "before:" in _text(taught) and "after :" in _text(taught) and "design taught: True" in _text(taught)
    assert _images(taught) == 1 and (work / "design_taught.pt").is_file()

    bundled = _text(_tagged(nb, "bundled"))
    assert "skipped" in bundled or "detections" in bundled
    assert sum(_images(c) for c in nb.cells if c.cell_type == "code") >= 6
    assert _files(REPO_ROOT / "notebooks") == repo_before, "the notebook wrote into the repository"
