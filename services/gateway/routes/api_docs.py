"""`/docs` (Swagger UI) and `/redoc` (ReDoc) over the app's OpenAPI schema, with every script,
style sheet and icon served by the gateway itself (`/docs/assets/…`, from the `fastapi-offline`
package's copies of Swagger UI and ReDoc), so the pages work offline. No API key needed."""

from __future__ import annotations

from collections.abc import Callable
from importlib.resources import files
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse

from widebeam.services.http.errors import ApiError

ASSETS_ROUTE = "/docs/assets"
SWAGGER_JS = "swagger-ui-bundle.js"
SWAGGER_CSS = "swagger-ui.css"
REDOC_JS = "redoc.standalone.js"
FAVICON = "favicon.png"
ASSETS = (SWAGGER_JS, SWAGGER_CSS, REDOC_JS, FAVICON)
ASSET_CACHE = "public, max-age=86400"


def assets_folder() -> Path:
    """Where the installed `fastapi-offline` package keeps the Swagger UI and ReDoc files."""
    return Path(str(files("fastapi_offline") / "static"))


def create_router(title: str, openapi_url: str) -> APIRouter:
    router = APIRouter(include_in_schema=False)
    folder = assets_folder()
    missing = [name for name in ASSETS if not (folder / name).is_file()]
    if missing:
        raise RuntimeError(f"API docs assets missing from {folder}: {missing}")

    def page(
        request: Request,
        render: Callable[..., HTMLResponse],
        heading: str,
        assets: dict[str, str],  # render's URL parameter -> asset name
        **options: Any,
    ) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        urls = {param: f"{root}{ASSETS_ROUTE}/{name}" for param, name in assets.items()}
        schema = root + openapi_url
        return render(openapi_url=schema, title=f"{title} - {heading}", **urls, **options)

    @router.get("/docs")
    async def swagger_ui(request: Request) -> HTMLResponse:
        assets = {
            "swagger_js_url": SWAGGER_JS,
            "swagger_css_url": SWAGGER_CSS,
            "swagger_favicon_url": FAVICON,
        }
        # Swagger UI's default validator badge is an image from an outside service.
        parameters = {"validatorUrl": None, "persistAuthorization": True}
        return page(
            request, get_swagger_ui_html, "API docs", assets, swagger_ui_parameters=parameters
        )

    @router.get("/redoc")
    async def redoc(request: Request) -> HTMLResponse:
        assets = {"redoc_js_url": REDOC_JS, "redoc_favicon_url": FAVICON}
        return page(request, get_redoc_html, "ReDoc", assets, with_google_fonts=False)

    @router.get(ASSETS_ROUTE + "/{name}")
    async def docs_asset(name: str) -> FileResponse:
        if name not in ASSETS:
            raise ApiError(404, f"no API docs asset {name!r}", "not_found")
        headers = {"Cache-Control": ASSET_CACHE}
        return FileResponse(folder / name, headers=headers)

    return router
