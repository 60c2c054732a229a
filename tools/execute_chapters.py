"""Execute the book's chapters: write each executed notebook next to its source.

    python tools/execute_chapters.py [CHAPTER.md ...]

The MyST Markdown file (chapters/NN_name.md) is the source; this writes
chapters/NN_name.ipynb with the outputs the book shows and nbval compares.
"""

import argparse
import pathlib
import sys
import time

import jupytext
import nbclient

CHAPTERS = pathlib.Path(__file__).resolve().parents[1] / "chapters"


def execute(source):
    notebook = jupytext.read(source)
    start = time.perf_counter()
    nbclient.NotebookClient(notebook, timeout=900, kernel_name="python3",
                            resources={"metadata": {"path": str(source.parent)}}).execute()
    print(f"{source.name}: executed in {time.perf_counter() - start:.1f} s", flush=True)
    jupytext.write(notebook, source.with_suffix(".ipynb"))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="*", type=pathlib.Path)
    args = parser.parse_args(argv)
    for source in args.chapters or sorted(CHAPTERS.glob("*.md")):
        execute(source.resolve())


if __name__ == "__main__":
    sys.exit(main())
