"""Show a region of the project's source in a chapter, read from the file itself.

A chapter calls :func:`show_source` in a code cell whose input the online book
hides: the output names the file and holds the region, as Markdown (a fenced
block, which Jupyter Book and JupyterLab both highlight), so that a reader
running the notebook sees the same code as one reading it online. (A
``literalinclude`` directive renders only in the online book: JupyterLab
shows a Markdown cell's directives as raw text.) The stored output is
compared with a fresh one by nbval, so a listing cannot drift from its file.
"""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
LANGUAGES = {".py": "python", ".cc": "cpp", ".cu": "cpp", ".h": "cpp", ".cuh": "cpp",
             ".txt": "cmake", ".toml": "toml", ".sh": "bash"}


class Listing:
    """Lines `first`..`last` (from 1) of `path`, relative to the repository;
    folded under `summary` (a click opens it) where one is given."""

    def __init__(self, path, code, first, last, summary=None):
        self.path, self.code, self.first, self.last = path, code, first, last
        self.summary = summary

    def _repr_markdown_(self):
        language = LANGUAGES.get(pathlib.PurePath(self.path).suffix, "")
        text = f"`{self.path}`, lines {self.first}-{self.last}:\n\n```{language}\n{self.code}\n```"
        # JupyterLab unfolds a cell's outputs when it runs the cell, so a
        # solution stays folded only inside its own output.
        if self.summary:
            text = f"<details><summary>{self.summary}</summary>\n\n{text}\n\n</details>"
        return text

    def __repr__(self):
        return f"{self.path}, lines {self.first}-{self.last}"


def _line_of(lines, marker, start, path):
    for number in range(start, len(lines)):
        if marker in lines[number]:
            return number
    raise ValueError(f"{path}: no line after line {start} contains {marker!r}")


def _object_lines(text, name, path):
    """(first, end) of the class or function `name`, decorators included."""
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            return first - 1, node.end_lineno
    raise ValueError(f"{path}: no class or function named {name!r}")


def show_source(path, *, start_after=None, start_at=None, end_before=None, pyobject=None,
                folded=None):
    """The region of `path` (relative to the repository) that starts after the
    first line containing `start_after` (or at the line containing
    `start_at`) and ends before the next line containing `end_before`; or the
    Python class or function `pyobject`. A marker that matches no line is a
    ValueError, so that a chapter whose source moved fails to run. `folded`
    folds the listing under that summary (a solution, say)."""
    text = (ROOT / path).read_text()
    lines = text.splitlines()
    if pyobject is not None:
        start, end = _object_lines(text, pyobject, path)
    else:
        start = 0
        if start_after is not None:
            start = _line_of(lines, start_after, 0, path) + 1
        elif start_at is not None:
            start = _line_of(lines, start_at, 0, path)
        end = len(lines) if end_before is None else _line_of(lines, end_before, start, path)
    while start < end and not lines[start].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return Listing(path, "\n".join(lines[start:end]), start + 1, end, folded)
