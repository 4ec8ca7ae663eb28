"""Read routes (open) and activation (a write): catalogs, versions, item and SID lookups.

Plain ``def`` handlers: FastAPI runs them in worker threads, so blocking Redis calls never
stall the event loop.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query

from widebeam.services.catalog.service.models import (
    ActivateRequest,
    ActivateResult,
    CatalogInfo,
    CatalogList,
    CatalogSummary,
    ItemLookup,
    SidLookup,
    VersionInfo,
    version_info,
)
from widebeam.services.catalog.service.state import State, current_versions
from widebeam.services.catalog.store import CatalogStore, VersionNotFoundError, validate_name
from widebeam.services.http.api_keys import ApiKeyDependency
from widebeam.services.http.error_schema import error_responses
from widebeam.services.http.errors import ApiError

_ERRORS = error_responses(
    {
        400: "invalid catalog name or parameter",
        404: "unknown catalog, version, item or SID",
        503: "Redis unavailable",
    }
)
VersionQuery = Query(None, ge=1, description="version to read; default: the current one")


def _known(store: CatalogStore, name: str) -> int | None:
    """The catalog's current version; 404 when the catalog was never published."""
    validate_name(name)
    current = store.current_version(name)
    if current is None and not store.list_versions(name):
        raise ApiError(404, f"catalog {name!r} does not exist", "not_found")
    return current


def _version(store: CatalogStore, name: str, version: int | None) -> int:
    current = _known(store, name)
    if version is not None:
        return version
    if current is None:
        raise ApiError(404, f"catalog {name!r} has no current version", "not_found")
    return current


def create_router(require_write_key: ApiKeyDependency) -> APIRouter:
    """The `/v1/catalogs` reads and activation; `require_write_key` guards the write."""
    router = APIRouter(prefix="/v1/catalogs", tags=["catalogs"])

    @router.get("", response_model=CatalogList, responses=_ERRORS, summary="List catalogs")
    def list_catalogs(state: State) -> CatalogList:
        items = current_versions(state.store).items()
        return CatalogList(catalogs=[CatalogSummary(name=n, current_version=v) for n, v in items])

    @router.get("/{name}", response_model=CatalogInfo, responses=_ERRORS, summary="One catalog")
    def get_catalog(name: str, state: State) -> CatalogInfo:
        current = _known(state.store, name)
        versions = state.store.list_versions(name)
        info = None
        if current is not None:
            info = version_info(state.store.manifest(name, current), current)
        return CatalogInfo(name=name, current_version=current, versions=versions, current=info)

    @router.get(
        "/{name}/versions/{version}",
        response_model=VersionInfo,
        responses=_ERRORS,
        summary="Manifest summary of one version",
    )
    def get_version(name: str, version: int, state: State) -> VersionInfo:
        current = _known(state.store, name)
        return version_info(state.store.manifest(name, version), current)

    @router.post(
        "/{name}/activate",
        response_model=ActivateResult,
        responses={**_ERRORS, **error_responses({401: "missing or wrong API key"})},
        dependencies=[Depends(require_write_key)],
        summary="Point `current` at a retained version (rollback / roll-forward)",
    )
    def activate(name: str, body: ActivateRequest, state: State) -> ActivateResult:
        previous = _known(state.store, name)
        try:
            state.store.activate(name, body.version)
        except VersionNotFoundError:
            retained = state.store.list_versions(name)
            raise ApiError(
                404,
                f"catalog {name!r} has no version {body.version} (retained: {retained})",
                "not_found",
                param="version",
            ) from None
        return ActivateResult(name=name, version=body.version, previous_version=previous)

    @router.get(
        "/{name}/items/{item_id}",
        response_model=ItemLookup,
        responses=_ERRORS,
        summary="SID of an item",
    )
    def get_item(
        name: str,
        item_id: str,
        state: State,
        version: int | None = VersionQuery,
    ) -> ItemLookup:
        v = _version(state.store, name, version)
        sid = state.store.item_sid(name, v, item_id)
        if sid is None:
            raise ApiError(
                404, f"catalog {name!r} version {v} has no item {item_id!r}", "not_found"
            )
        return ItemLookup(name=name, version=v, item_id=item_id, sid=list(sid))

    @router.get(
        "/{name}/sids/{codes}",
        response_model=SidLookup,
        responses=_ERRORS,
        summary="Items of a SID (codes like 12,5,300)",
    )
    def get_sid(
        name: str,
        codes: str,
        state: State,
        version: int | None = VersionQuery,
    ) -> SidLookup:
        try:
            sid = [int(c) for c in codes.replace(" ", "").split(",")]
        except ValueError:
            message = f"SID {codes!r} is not comma-separated integers"
            raise ApiError(400, message, "invalid_request", param="codes") from None
        v = _version(state.store, name, version)
        items = state.store.sid_items(name, v, sid)
        if not items:
            raise ApiError(404, f"catalog {name!r} version {v} has no SID {codes!r}", "not_found")
        return SidLookup(name=name, version=v, sid=sid, item_ids=items)

    return router
