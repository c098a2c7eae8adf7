"""The schema's pages, /docs (Swagger UI) and /redoc (ReDoc), drawn from files this service installs.

FastAPI's own pages load Swagger UI and ReDoc from a public CDN (and ReDoc's fonts from Google),
which leaves them blank on an air-gapped cluster. The same files come installed with the
`fastapi-offline` distribution (MIT; it carries swagger-ui-dist 5's bundle and stylesheet and
ReDoc 2's standalone bundle) and are served from `ASSETS_URL`, open whatever the settings say:
they are public code, and a browser sends no bearer token when a page loads a script.
"""

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS_URL = "/docs/assets"
ASSETS_PACKAGE = ("fastapi_offline", "static")
"""(package, folder) of the installed files: swagger-ui-bundle.js, swagger-ui.css, redoc.standalone.js, favicon.png."""
OPENAPI_URL = "/openapi.json"
OAUTH2_REDIRECT_URL = "/docs/oauth2-redirect"
TITLE = "gpuhealth API"

pages = APIRouter()
"""/docs, its OAuth2 redirect and /redoc, open: included while reads are open (`health.docs` serves
/docs behind the token otherwise)."""


def mount_assets(app: FastAPI) -> None:
    """Serve the pages' scripts, stylesheet and icon from the installed package under `ASSETS_URL`."""
    app.mount(ASSETS_URL, StaticFiles(packages=[ASSETS_PACKAGE]), name="docs-assets")


def swagger_ui(request: Request, oauth2_redirect: bool = True) -> HTMLResponse:
    """Swagger UI's page over the schema, every file it loads from this server.

    `oauth2_redirect`: name the OAuth2 redirect page, which only `pages` serves.
    """
    root = request.scope.get("root_path", "")
    return get_swagger_ui_html(
        openapi_url=f"{root}{OPENAPI_URL}",
        title=TITLE,
        swagger_js_url=f"{root}{ASSETS_URL}/swagger-ui-bundle.js",
        swagger_css_url=f"{root}{ASSETS_URL}/swagger-ui.css",
        swagger_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
        oauth2_redirect_url=f"{root}{OAUTH2_REDIRECT_URL}" if oauth2_redirect else None,
    )


@pages.get("/docs", include_in_schema=False)
async def docs_page(request: Request) -> HTMLResponse:
    """The schema's Swagger UI page."""
    return swagger_ui(request)


@pages.get(OAUTH2_REDIRECT_URL, include_in_schema=False)
async def oauth2_redirect() -> HTMLResponse:
    """Swagger UI's OAuth2 redirect page (inline script, nothing loaded)."""
    return get_swagger_ui_oauth2_redirect_html()


@pages.get("/redoc", include_in_schema=False)
async def redoc_page(request: Request) -> HTMLResponse:
    """The schema's ReDoc page, in the browser's own fonts (no Google Fonts)."""
    root = request.scope.get("root_path", "")
    return get_redoc_html(
        openapi_url=f"{root}{OPENAPI_URL}",
        title=TITLE,
        redoc_js_url=f"{root}{ASSETS_URL}/redoc.standalone.js",
        redoc_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
        with_google_fonts=False,
    )
