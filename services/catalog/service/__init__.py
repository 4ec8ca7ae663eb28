"""Catalog HTTP service (``widebeam catalog serve``): upload, publish, activate, look up.

``create_app(settings)`` builds the FastAPI app; ``server.run(settings)`` serves it with uvicorn.
"""

from widebeam.services.catalog.service.app import create_app
from widebeam.services.catalog.service.settings import CatalogSettings

__all__ = ["CatalogSettings", "create_app"]
