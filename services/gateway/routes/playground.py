"""The playground: `/` serves `playground/index.html`, `/playground/{file}` its script and style
sheet (plain files, no build step, nothing from outside). The page calls the public API with the
key the user types (`/v1/items`, `/v1/recommend`, `/readyz`), so serving it needs no key."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

from widebeam.services.http.errors import ApiError

STATIC_ROUTE = "/playground"
PAGE = "index.html"
SERVED_SUFFIXES = (".html", ".js", ".css")
# Revalidated on every load (ETag), so a gateway upgrade never leaves a stale script cached.
CACHE_CONTROL = "no-cache"


def playground_folder() -> Path:
    return Path(str(files("widebeam.services.gateway") / "playground"))


def create_router() -> APIRouter:
    router = APIRouter(include_in_schema=False)
    folder = playground_folder()
    served = {p.name for p in folder.iterdir() if p.suffix in SERVED_SUFFIXES}
    if PAGE not in served:
        raise RuntimeError(f"the playground page is missing: {folder / PAGE}")
    headers = {"Cache-Control": CACHE_CONTROL}

    @router.get("/")
    async def page() -> FileResponse:
        return FileResponse(folder / PAGE, headers=headers)

    @router.get(STATIC_ROUTE + "/{name}")
    async def static_file(name: str) -> FileResponse:
        if name not in served:
            raise ApiError(404, f"the playground has no file {name!r}", "not_found")
        return FileResponse(folder / name, headers=headers)

    return router
