"""/docs and /redoc work without the internet: every file they load is ours, and the page draws.

On an air-gapped cluster a page that loads Swagger UI from a CDN is blank. The asset test reads the
pages' HTML; the browser test renders /docs in headless Chromium, which here can reach nothing but
loopback, and checks that the screenshot is not a blank page.
"""

from __future__ import annotations

import os
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
from fastapi.testclient import TestClient

from api.app import ApiConfig, create_app
from store import Store
from tests.api.conftest import TOKEN, auth
from tests.api.live import live_server
from tests.integration.conftest import require_tool

PAGES = ("/docs", "/redoc")
INK_FLOOR = 0.05
"""Share of non-white pixels above which a screenshot is a drawn page: Swagger UI's /docs with its
title, tags and coloured list of operations inks 0.100 of a 1280x2000 shot here; the page as it was,
its script and stylesheet on a CDN that cannot be reached, 0.000."""


class _Assets(HTMLParser):
    """The URLs of a page's scripts, stylesheets and icons (every `src`, and `href` of a `<link>`)."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value and (name == "src" or (name == "href" and tag == "link")):
                self.urls.append(value)


def _assets(html: str) -> list[str]:
    parser = _Assets()
    parser.feed(html)
    return parser.urls


def _app(tmp_path: Path, **cfg: object) -> TestClient:
    return TestClient(create_app(Store(f"sqlite:///{tmp_path / 'x.db'}"), ApiConfig(**cfg)))  # type: ignore[arg-type]


@pytest.mark.parametrize("page", PAGES)
def test_every_asset_a_page_loads_is_ours(tmp_path: Path, page: str) -> None:
    client = _app(tmp_path)
    r = client.get(page)
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    urls = _assets(r.text)
    assert any(u.endswith(".js") for u in urls), urls  # the page is Swagger UI's or ReDoc's, drawn by a script
    for url in urls:
        assert urlsplit(url).netloc == "" and url.startswith("/"), f"{page} loads {url} from another host"
        got = client.get(urljoin("http://testserver" + page, url))
        assert got.status_code == 200 and got.content, url
    assert "fonts.googleapis.com" not in r.text and "cdn." not in r.text


def test_closed_docs_page_loads_its_assets_without_the_token(tmp_path: Path) -> None:
    client = _app(tmp_path, token=TOKEN, read_open=False)
    r = client.get("/docs", headers=auth())
    assert r.status_code == 200
    for url in _assets(r.text):
        assert client.get(url).status_code == 200, url  # a browser sends no bearer token for a script
    assert client.get("/openapi.json").status_code == 401


def _ink(png: Path) -> float:
    """Share of the screenshot's pixels that are not (near) white."""
    from PIL import Image  # matplotlib's dependency; imported here so unit collection needs no PIL

    with Image.open(png) as img:
        grey = img.convert("L")
        hist = grey.histogram()
    return 1 - sum(hist[245:]) / sum(hist)


@pytest.mark.integration
def test_docs_page_renders_offline_in_chromium(tmp_path: Path) -> None:
    chromium = require_tool("chromium")
    app = create_app(Store(f"sqlite:///{tmp_path / 'x.db'}"), ApiConfig())
    shot = tmp_path / "docs.png"
    with live_server(app) as url:
        argv = [
            chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000",
            "--window-size=1280,2000", f"--screenshot={shot}", f"{url}/docs",
        ]  # fmt: skip
        t0 = time.monotonic()
        env = {**os.environ, "HOME": str(tmp_path)}  # chromium writes its crash and font caches there
        subprocess.run(argv, check=True, capture_output=True, timeout=60, env=env)
        took = time.monotonic() - t0
    ink = _ink(shot)
    print(f"chromium took {took:.1f} s; non-white share of /docs: {ink:.3f}")
    assert ink > INK_FLOOR, f"/docs rendered blank in Chromium ({ink:.3%} non-white)"
