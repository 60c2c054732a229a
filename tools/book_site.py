"""Sphinx extension for the book's site: repository links, local MathJax, no thebe.

The repository URL is never written in the configuration. It comes, in this
order, from GPU_OPS_REPOSITORY_URL (set it to publish elsewhere), from
GITHUB_REPOSITORY in GitHub Actions, or from the git remote "origin" where
that is a web address. Without one the site shows no repository, issue or
edit buttons rather than dead ones, and the intro says so in words.

MathJax is served from the site itself where build.sh has fetched it into
build/mathjax (npm), so that a copy of the site renders its maths without a
network; elsewhere Sphinx's default CDN address stays.

Jupyter Book always loads sphinx-thebe, whose configuration script lands in
each page twice (a JavaScript error: THEBE_JS_URL declared twice) and points
to a CDN. The book has no live-code buttons, so its scripts are dropped.
"""

import os
import pathlib
import re
import subprocess

_REMOTE_FORMS = [
    re.compile(r"^git@(?P<host>[^:]+):(?P<path>.+?)(?:\.git)?/?$"),
    re.compile(r"^(?:https?|ssh)://(?:[^@/]+@)?(?P<host>[^/:]+)(?::\d+)?/(?P<path>.+?)(?:\.git)?/?$"),
]


def url_from_remote(remote):
    """The web address of a git remote on a forge, or None (a local path, say)."""
    for form in _REMOTE_FORMS:
        match = form.match(remote.strip())
        if match:
            return f"https://{match['host']}/{match['path']}"
    return None


def repository_url(environ=os.environ, source_dir="."):
    """The book's repository address from the environment, or None."""
    if environ.get("GPU_OPS_REPOSITORY_URL"):
        return environ["GPU_OPS_REPOSITORY_URL"].rstrip("/")
    if environ.get("GITHUB_REPOSITORY"):
        server = environ.get("GITHUB_SERVER_URL", "https://github.com")
        return f"{server}/{environ['GITHUB_REPOSITORY']}"
    remote = subprocess.run(["git", "-C", str(source_dir), "config", "--get", "remote.origin.url"],
                            capture_output=True, text=True, check=False).stdout
    return url_from_remote(remote) if remote.strip() else None


MATHJAX = "mathjax/es5/tex-chtml.js"


def _configure(app, config):
    local_mathjax = pathlib.Path(app.srcdir) / "build" / "mathjax"
    if (local_mathjax / MATHJAX).is_file():
        config.html_static_path = [*config.html_static_path, str(local_mathjax)]
        config.mathjax_path = MATHJAX
    url = repository_url(source_dir=app.srcdir)
    options = dict(config.html_theme_options)
    options.update(repository_url=url or "", use_repository_button=bool(url),
                   use_issues_button=bool(url))
    config.html_theme_options = options
    # The theme reads its colour mode from here; left empty, every page logs
    # an error ("invalid theme mode") before falling back to "auto".
    config.html_context = {**config.html_context, "default_mode": "auto"}
    config.myst_substitutions = {
        **config.myst_substitutions,
        "repository": f"[its repository]({url})" if url else "its repository",
    }


def _without_thebe(app, pagename, templatename, context, doctree):
    context["script_files"] = [
        script for script in context.get("script_files", [])
        if "thebe" not in (script.filename or "") and "THEBE" not in script.attributes.get("body", "")
    ]


def setup(app):
    app.connect("config-inited", _configure)
    app.connect("html-page-context", _without_thebe)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
