"""The book: sources and executed notebooks agree, and the built HTML is whole.

The HTML checks need `./build.sh` (or `jupyter-book build .`) to have run.
"""

import json
import pathlib
import re

import jupytext
import pytest
import yaml

pytestmark = pytest.mark.book  # needs the book's tools (skipped on GPU machines)

ROOT = pathlib.Path(__file__).parents[1]
SOURCES = sorted((ROOT / "chapters").glob("*.md"))
HTML = ROOT / "_build" / "html"


def _cells(notebook):
    return [(c.cell_type, c.source.strip()) for c in notebook.cells]


def test_every_chapter_has_a_notebook():
    assert SOURCES
    for source in SOURCES:
        assert source.with_suffix(".ipynb").exists(), f"run tools/execute_chapters.py {source}"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_notebook_matches_its_source_and_is_executed(source):
    notebook = jupytext.read(source.with_suffix(".ipynb"))
    assert _cells(notebook) == _cells(jupytext.read(source)), (
        f"{source.name} changed since it was executed: run tools/execute_chapters.py")
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.execution_count is not None, f"unexecuted cell in {source.name}"
            errors = [o for o in cell.outputs if o.output_type == "error"]
            if "raises-exception" not in cell.metadata.get("tags", []):
                assert not errors, f"error output in {source.name}: {cell.source[:60]}"
            else:
                assert errors, f"a raises-exception cell in {source.name} did not raise"


def test_listing_appendix_includes_every_source_file():
    listing = (ROOT / "appendices" / "listing.md").read_text()
    for path in (ROOT / "gpu_ops").rglob("*"):
        if path.suffix in {".py", ".cc", ".cu", ".h", ".cuh"} and "__pycache__" not in path.parts:
            assert f"../{path.relative_to(ROOT)}" in listing, path


def _toc_files():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc["parts"]:
        files += [chapter["file"] for chapter in part["chapters"]]
    return files


def _built():
    if not (HTML / "index.html").exists():
        pytest.fail("no built book in _build/html: run ./build.sh first")
    return HTML


def test_every_toc_page_is_built():
    html = _built()
    for name in _toc_files():
        assert (html / f"{name}.html").exists(), name


def test_every_image_exists():
    html = _built()
    for page in html.rglob("*.html"):
        for src in re.findall(r'<img[^>]+src="([^"]+)"', page.read_text()):
            if not src.startswith(("http:", "https:", "data:")):
                assert (page.parent / src).exists(), f"{page.name}: {src}"


def test_no_error_output_outside_raises_exception_cells():
    html = _built()
    for name in _toc_files():
        page = (html / f"{name}.html").read_text()
        # a cell's div starts with class="cell " (cell_input and cell_output are inside)
        for cell in re.split(r'(?=<div class="cell )', page)[1:]:
            if "output traceback" in cell or 'class="output error' in cell:
                assert "tag_raises-exception" in cell, f"error output in {name}"


def test_figures_have_captions():
    html = _built()
    for name in ("chapters/01_kernels_and_ffi", "chapters/08_performance"):
        page = (html / f"{name}.html").read_text()
        assert "<figcaption" in page and "<img" in page, name


# The widest output line that fits the book's text column without scrolling.
OUTPUT_COLUMNS = 92
MACHINE_PATHS = re.compile(r"site-packages|/home/|/root/|/work/|/tmp/|\.venv")


def _shown_code_cells(notebook):
    for cell in notebook.cells:
        if cell.cell_type == "code" and "remove-cell" not in cell.metadata.get("tags", []):
            yield cell


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_taught_errors_are_short_and_name_no_machine_paths(source):
    notebook = jupytext.read(source.with_suffix(".ipynb"))
    for cell in _shown_code_cells(notebook):
        for error in (o for o in cell.outputs if o.output_type == "error"):
            text = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(error.traceback))
            assert text.count("\n") < 12, f"{source.name}: {len(text.splitlines())} lines"
            assert not MACHINE_PATHS.search(text), f"{source.name}: {text[:200]}"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_printed_outputs_fit_the_page(source):
    notebook = jupytext.read(source.with_suffix(".ipynb"))
    for cell in _shown_code_cells(notebook):
        if "hide-output" in cell.metadata.get("tags", []):
            continue
        for output in cell.outputs:
            text = output.get("text") or output.get("data", {}).get("text/plain", "")
            for line in text.splitlines():
                assert len(line) <= OUTPUT_COLUMNS, f"{source.name}: {line[:60]}... ({len(line)})"


# The results appendix shows the measurements and the environment: it teaches
# nothing to practise.
@pytest.mark.parametrize("source", [s for s in SOURCES if not s.name.endswith("_results.md")],
                         ids=lambda p: p.name)
def test_chapter_has_an_exercise_with_a_hidden_checked_solution(source):
    cells = jupytext.read(source.with_suffix(".ipynb")).cells
    (heading,) = [i for i, c in enumerate(cells)
                  if c.cell_type == "markdown" and "## Exercise" in c.source.splitlines()]
    end = next(i for i in range(heading + 1, len(cells))
               if cells[i].cell_type == "markdown" and cells[i].source.startswith("## "))
    solution = cells[end - 1]  # the section's last cell
    assert solution.cell_type == "code" and "hide-input" in solution.metadata.get("tags", [])
    # it checks itself, so that nbval tests it
    assert "assert" in solution.source or "check_grads(" in solution.source
    assert solution.outputs and not [o for o in solution.outputs if o.output_type == "error"]


# Chapters 1 to 7 are the exercise track: each builds a step of the reader's
# own operation, checked against jax.nn.softmax, with the solution's check.
@pytest.mark.parametrize("step", range(1, 8))
def test_the_exercise_track_runs_through_chapters_1_to_7(step):
    (source,) = [s for s in SOURCES if s.name.startswith(f"0{step}_")]
    cells = jupytext.read(source.with_suffix(".ipynb")).cells
    sources = [c.source for c in cells if c.cell_type == "code"]
    assert any(f"check({step})" in s for s in sources)
    solution = next(c for c in cells if f"check({step}, solution=True)" in c.source)
    assert "hide-input" in solution.metadata.get("tags", [])
    printed = "".join(o.get("text", "") for o in solution.outputs)
    assert f"Step {step}, " in printed and "\n  correct:" in printed
    # the solution's listing stays folded in its output, where JupyterLab,
    # which unfolds the outputs of a cell it runs, keeps it folded too
    (listing,) = [o.data["text/markdown"] for o in solution.outputs if "data" in o]
    assert listing.startswith("<details><summary>A solution")