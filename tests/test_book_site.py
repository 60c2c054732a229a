"""The site's repository links: taken from the environment, absent when unknown."""

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import book_site  # noqa: E402

pytestmark = pytest.mark.book  # needs the book's tools (skipped on GPU machines)


@pytest.mark.parametrize("remote,url", [
    ("git@github.com:someone/jax-book.git", "https://github.com/someone/jax-book"),
    ("https://github.com/someone/jax-book.git", "https://github.com/someone/jax-book"),
    ("https://github.com/someone/jax-book", "https://github.com/someone/jax-book"),
    ("ssh://git@gitlab.example.org:2222/group/book.git", "https://gitlab.example.org/group/book"),
    ("https://token@github.com/someone/jax-book.git/", "https://github.com/someone/jax-book"),
    ("/work/main", None),
    ("../main", None),
])
def test_url_from_a_git_remote(remote, url):
    assert book_site.url_from_remote(remote) == url


def test_explicit_url_then_github_actions_then_the_remote(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "remote", "add", "origin",
                    "git@github.com:from/remote.git"], check=True)
    actions = {"GITHUB_REPOSITORY": "from/actions"}
    explicit = {**actions, "GPU_OPS_REPOSITORY_URL": "https://example.org/explicit/"}
    assert book_site.repository_url(explicit, tmp_path) == "https://example.org/explicit"
    assert book_site.repository_url(actions, tmp_path) == "https://github.com/from/actions"
    assert book_site.repository_url({}, tmp_path) == "https://github.com/from/remote"
    local = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(tmp_path), str(local)], check=True)
    assert book_site.repository_url({}, local) is None  # a clone of a local folder


def _build(output, **environ):
    env = {k: v for k, v in os.environ.items()
           if k not in ("GPU_OPS_REPOSITORY_URL", "GITHUB_REPOSITORY")}
    env.update(environ)
    subprocess.run([sys.executable, "-c",
                    "import sys; from jupyter_book.cli.main import main; sys.exit(main())",
                    "build", str(ROOT), "--warningiserror", "--keep-going", "--quiet",
                    "--path-output", str(output)],
                   check=True, env=env, capture_output=True)
    return output / "_build" / "html"


def _pages(html):
    """The site's pages (not the theme's templates under _static)."""
    return {page: page.read_text() for page in html.rglob("*.html")
            if "_static" not in page.relative_to(html).parts}


def test_built_with_a_repository_url_links_to_it(tmp_path):
    url = "https://github.com/someone/jax-book"
    pages = _pages(_build(tmp_path, GPU_OPS_REPOSITORY_URL=url))
    intro = pages[tmp_path / "_build" / "html" / "intro.html"]
    assert f'<a class="reference external" href="{url}">its repository</a>' in intro
    for page, text in pages.items():
        if page.name not in ("search.html", "index.html"):
            assert f'href="{url}"' in text and f'href="{url}/issues/new' in text, page


def test_built_without_one_shows_no_repository_buttons(tmp_path):
    # GIT_DIR pointing nowhere: no remote to read the address from.
    pages = _pages(_build(tmp_path, GIT_DIR=str(tmp_path / "no-repository")))
    assert "<p>Clone its repository, then, in its folder:</p>" in pages[
        tmp_path / "_build" / "html" / "intro.html"]
    for page, text in pages.items():
        assert "btn-source-repository-button" not in text, page
        assert "/issues/new" not in text, page
        assert "gpu-ops-book" not in text, page
        assert "THEBE" not in text, page  # no thebe scripts (declared twice, from a CDN)
        assert "btn-download-source-button" in text or page.name in (
            "search.html", "index.html"), page
    assert not (tmp_path / "_build" / "html" / "genindex.html").exists()
