"""Running the chapters locally, as the README says: JupyterLab in a browser
opens each chapter's .md as a Jupytext Notebook, and a reader runs its cells.

JupyterLab is started from this environment and driven in headless Chromium
by Playwright, through the commands of its menus (its application object is
exposed to the page for that). For every chapter: it opens as a notebook;
its code cells, run one after another as a reader runs them, fail only where
the chapter teaches an error (tagged raises-exception; Run All stops there,
which a test here checks); every source listing shows its code; what the online book hides
(solutions, listings' calls) is collapsed, and a solution's listing folded; and saving the notebook leaves
its file as it was, so that a reader's run shows no change in git. A reader
opens and edits an exercise file in JupyterLab's editor.
"""

import os
import pathlib
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid

import jupytext
import pytest

from test_site_in_browser import BROWSERS, CHROMIUM_FLAGS

pytestmark = pytest.mark.book  # needs the book's tools (skipped on GPU machines)

ROOT = pathlib.Path(__file__).parents[1]
CHAPTERS = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "chapters").glob("[0-9]*.md"))
CELL_TIME_LIMIT_MS = 300_000

# Runs the open notebook's code cells in order, each to its end, and
# returns what each did: its tags, whether JupyterLab collapsed its input,
# its errors and its Markdown outputs.
RUN_CELLS = """async (limit) => {
  const app = window.jupyterapp;
  const panel = app.shell.currentWidget;  // the notebook just opened
  await panel.sessionContext.ready;
  const notebook = panel.content;
  const cells = [];
  for (let i = 0; i < notebook.widgets.length; i++) {
    const cell = notebook.widgets[i];
    if (cell.model.type !== 'code') continue;
    notebook.activeCellIndex = i;
    const timeout = new Promise((_, reject) => setTimeout(
        () => reject(new Error('cell ' + i + ' ran longer than ' + limit + ' ms')), limit));
    await Promise.race([app.commands.execute('notebook:run-cell'), timeout]);
    const outputs = cell.model.outputs.toJSON();
    cells.push({
      index: i,
      tags: cell.model.getMetadata('tags') || [],
      input_hidden: cell.inputHidden,
      errors: outputs.filter(o => o.output_type === 'error').map(o => o.ename + ': ' + o.evalue),
      listings: Array.from(cell.node.querySelectorAll('.jp-RenderedMarkdown pre'))
          .map(pre => pre.textContent).filter(text => text.trim().length > 0).length,
      folded: cell.node.querySelectorAll('.jp-RenderedMarkdown details:not([open]) pre').length,
    });
  }
  return cells;
}"""


def _notebook(path):
    """JavaScript for the open notebook of `path` (whichever widget has the focus)."""
    return ("Array.from(window.jupyterapp.shell.widgets('main'))"
            ".find(w => w.context && w.context.path === path)")


SAVE_UNTIL_CLEAN = f"""async (path) => {{
  const panel = {_notebook("path")};
  for (let attempt = 0; attempt < 10; attempt++) {{
    await panel.context.save();
    await new Promise(resolve => setTimeout(resolve, 500));
    if (!panel.context.model.dirty) return true;
  }}
  return false;
}}"""
CLOSE = f"""async (path) => {{
  const panel = {_notebook("path")};
  await panel.sessionContext.shutdown();
  panel.dispose();
}}"""


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def jupyter_lab(tmp_path_factory):
    port, token = _free_port(), uuid.uuid4().hex
    # JupyterLab's settings and workspaces of this run only (the reader's stay
    # as they are), without its news, whose question would cover the page.
    settings = tmp_path_factory.mktemp("jupyterlab_settings")
    news = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True)
    news.write_text('{"fetchNews": "false"}')
    env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(settings),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path_factory.mktemp("jupyterlab_workspaces"))}
    process = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}",
         "--ip=127.0.0.1", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={ROOT}",
         "--LabApp.expose_app_in_browser=True", "--allow-root"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=5)
                break
            except OSError:
                if process.poll() is not None:
                    pytest.fail(f"JupyterLab exited: {process.stderr.read().decode()[-2000:]}")
                time.sleep(0.5)
        else:
            pytest.fail("JupyterLab did not start in 60 s")
        yield f"{url}/lab?token={token}"
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def lab_page(jupyter_lab):
    executable = next(filter(None, map(shutil.which, BROWSERS)), None)
    if executable is None:
        pytest.fail("no Chromium found (./build.sh test installs Debian's chromium as root)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(jupyter_lab)
        page.wait_for_function(
            "window.jupyterapp && window.jupyterapp.commands.hasCommand('docmanager:open')"
            " && window.jupyterapp.commands.hasCommand('notebook:run-cell')", timeout=60_000)
        page.evaluate("async () => { await window.jupyterapp.restored; }")
        yield page
        browser.close()


def _command(page, command, args=None):
    page.evaluate("async ([command, args]) => {"
                  " await window.jupyterapp.commands.execute(command, args || {}); }",
                  [command, args])


def _open_chapter(page, chapter):
    """Open a chapter's .md as a Jupytext Notebook, as the README says, and
    wait for its cells."""
    _command(page, "docmanager:open", {"path": chapter, "factory": "Jupytext Notebook"})
    page.wait_for_function(
        "(path) => { const w = window.jupyterapp.shell.currentWidget;"
        " return w && w.context && w.context.path === path && w.content.widgets.length > 0; }",
        arg=chapter)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_reader_runs_the_chapter_in_jupyter_lab(lab_page, chapter):
    before = (ROOT / chapter).read_bytes()
    _open_chapter(lab_page, chapter)
    cells = lab_page.evaluate(RUN_CELLS, CELL_TIME_LIMIT_MS)
    # Outputs that finish rendering after a save (figures) mark the notebook
    # changed again, and closing it would then ask whether to save.
    assert lab_page.evaluate(SAVE_UNTIL_CLEAN, chapter), f"{chapter} stays changed after saving"
    lab_page.evaluate(CLOSE, chapter)

    source = jupytext.read(ROOT / chapter)
    assert len(cells) == sum(cell.cell_type == "code" for cell in source.cells)
    for cell in cells:
        taught = "raises-exception" in cell["tags"]
        assert bool(cell["errors"]) == taught, (chapter, cell)
        if {"hide-input", "remove-input"} & set(cell["tags"]):
            assert cell["input_hidden"], (chapter, cell)
    listings = [c for c, s in zip(cells, (s for s in source.cells if s.cell_type == "code"))
                if "show_source(" in s.source and "import" not in s.source]
    assert all(cell["listings"] == 1 for cell in listings), (chapter, listings)
    # a solution's listing is folded in its output (a click opens it)
    folded = [c for c, s in zip(cells, (s for s in source.cells if s.cell_type == "code"))
              if "folded=" in s.source]
    assert all(cell["folded"] == 1 for cell in folded), (chapter, folded)
    assert (ROOT / chapter).read_bytes() == before, f"saving {chapter} changed it"


EXERCISE = "exercises/softmax/softmax.py"
EDIT_AND_SAVE = f"""async ([path, line]) => {{
  const editor = {_notebook("path")};
  const source = editor.content.model.sharedModel;
  const before = source.getSource();
  source.setSource(before + line);
  await editor.context.save();
  const saved = !editor.context.model.dirty;
  editor.dispose();
  return [before, saved];
}}"""


def test_a_reader_opens_and_edits_an_exercise_file(lab_page):
    # The README's JupyterLab, rooted at the repository, reaches the exercise
    # files that chapters 1-7 ask the reader to edit, in its editor.
    before = (ROOT / EXERCISE).read_bytes()
    line = "# written in JupyterLab's editor\n"
    try:
        _command(lab_page, "docmanager:open", {"path": EXERCISE, "factory": "Editor"})
        lab_page.wait_for_function(
            "(path) => { const w = window.jupyterapp.shell.currentWidget;"
            " return w && w.context && w.context.path === path && w.context.isReady; }",
            arg=EXERCISE)
        shown, saved = lab_page.evaluate(EDIT_AND_SAVE, [EXERCISE, line])
        assert shown == before.decode() and saved
        assert (ROOT / EXERCISE).read_bytes() == before + line.encode()
    finally:
        (ROOT / EXERCISE).write_bytes(before)


RUN_ALL = """async (limit) => {
  const app = window.jupyterapp;
  const panel = app.shell.currentWidget;
  await panel.sessionContext.ready;
  await Promise.race([app.commands.execute('notebook:run-all-cells'),
                      new Promise(resolve => setTimeout(resolve, limit))]);
  const code = panel.content.widgets.filter(cell => cell.model.type === 'code');
  return code.map(cell => ({tags: cell.model.getMetadata('tags') || [],
                            ran: cell.model.executionCount !== null}));
}"""


def test_run_all_stops_at_the_first_error_the_chapter_teaches(lab_page):
    # What the README tells a reader of Run All (JupyterLab 4.6): it stops at
    # a cell that shows an error on purpose, tagged raises-exception, and
    # runs no cell after it; so a reader runs the cells one by one.
    chapter = "chapters/04_abstract_evaluation.md"
    before = (ROOT / chapter).read_bytes()
    _open_chapter(lab_page, chapter)
    cells = lab_page.evaluate(RUN_ALL, CELL_TIME_LIMIT_MS)
    assert lab_page.evaluate(SAVE_UNTIL_CLEAN, chapter)
    lab_page.evaluate(CLOSE, chapter)
    first = next(i for i, cell in enumerate(cells) if "raises-exception" in cell["tags"])
    assert first < len(cells) - 1
    assert [cell["ran"] for cell in cells] == [i <= first for i in range(len(cells))], cells
    assert (ROOT / chapter).read_bytes() == before
