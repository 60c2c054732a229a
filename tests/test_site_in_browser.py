"""The built site in a real browser: headless Chromium driven by Playwright.

Every page of _build/html, served on localhost, is loaded on a phone-sized
screen (390 px) with every request outside the site refused, as a copy of the
site opened without a network would be: no JavaScript errors, no failed
requests, every image loaded, the maths rendered (MathJax is served from the
site), no page wider than the screen. Every link inside the site, anchors
included, leads somewhere. Needs ./build.sh (the site, and Chromium, which it
installs from Debian's packages): without a browser this test fails.
"""

import functools
import html.parser
import http.server
import pathlib
import shutil
import threading
import urllib.parse

import pytest

pytestmark = pytest.mark.book  # needs the book's tools (skipped on GPU machines)

ROOT = pathlib.Path(__file__).parents[1]
HTML = ROOT / "_build" / "html"
PHONE = {"width": 390, "height": 844}
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# Without these, Chromium keeps reaching for Google's services, which a
# machine without a network refuses (and a headless root run needs no sandbox).
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync"]


def _pages():
    return sorted(p.relative_to(HTML).as_posix() for p in HTML.rglob("*.html")
                  if not {"_static", "_sources"} & set(p.relative_to(HTML).parts))


class _LinksAndIds(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])


@functools.cache
def _parsed(page):
    parser = _LinksAndIds()
    parser.feed((HTML / page).read_text())
    return parser


@pytest.fixture(scope="module")
def site():
    if not (HTML / "index.html").exists():
        pytest.fail("no built book in _build/html: run ./build.sh first")
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(HTML))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def browser():
    executable = next(filter(None, map(shutil.which, BROWSERS)), None)
    if executable is None:
        pytest.fail("no Chromium found (./build.sh test installs Debian's chromium as root)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


def test_every_internal_link_and_anchor_resolves():
    assert _pages()
    for page in _pages():
        for href in _parsed(page).links:
            url = urllib.parse.urlparse(href)
            if url.scheme or href.startswith(("mailto:", "//")):
                continue
            target = (HTML / page).parent / urllib.parse.unquote(url.path) if url.path else HTML / page
            if target.is_dir():
                target = target / "index.html"
            assert target.is_file(), f"{page}: {href}"
            if url.fragment and target.suffix == ".html":
                target_page = target.resolve().relative_to(HTML.resolve()).as_posix()
                assert url.fragment in _parsed(target_page).ids, f"{page}: {href}"


WAIT_FOR_MATHJAX = """async () => {
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
}"""

PAGE_FACTS = """() => ({
    width: document.documentElement.scrollWidth,
    maths: document.querySelectorAll('.math').length,
    rendered: document.querySelectorAll('mjx-container').length,
    brokenImages: [...document.images].filter(i => !(i.complete && i.naturalWidth > 0))
                                      .map(i => i.getAttribute('src')),
    wide: [...document.querySelectorAll('body *')]
        .filter(e => e.getBoundingClientRect().right > innerWidth + 1 &&
                     !e.closest('pre, .highlight, .output, table, .table-wrapper, mjx-container'))
        .slice(0, 3).map(e => e.tagName + '.' + e.className),
})"""


@pytest.mark.parametrize("page", _pages() if HTML.exists() else ["index.html"])
def test_page_works_offline_on_a_phone(site, browser, page):
    context = browser.new_context(viewport=PHONE)
    problems = []
    context.route("**/*", lambda route: route.continue_() if route.request.url.startswith(site)
                  else (problems.append(f"request outside the site: {route.request.url}"),
                        route.abort()))
    browser_page = context.new_page()
    browser_page.on("pageerror", lambda error: problems.append(f"JavaScript error: {error}"))
    browser_page.on("console", lambda message: message.type == "error" and problems.append(
        f"console error: {message.text}"))
    browser_page.on("requestfailed", lambda request: problems.append(
        f"failed request: {request.url}"))
    browser_page.on("response", lambda response: response.status >= 400 and problems.append(
        f"HTTP {response.status}: {response.url}"))
    browser_page.goto(f"{site}/{page}", wait_until="networkidle")  # index.html redirects
    browser_page.evaluate(WAIT_FOR_MATHJAX)
    facts = browser_page.evaluate(PAGE_FACTS)
    context.close()
    assert not problems, problems
    assert not facts["brokenImages"], facts["brokenImages"]
    assert facts["rendered"] >= facts["maths"], f"{facts['maths']} maths, {facts['rendered']} rendered"
    if page == "intro.html":  # the formula of RMS norm
        assert facts["maths"] >= 1 and facts["rendered"] >= 1
    assert facts["width"] <= PHONE["width"], (facts["width"], facts["wide"])
