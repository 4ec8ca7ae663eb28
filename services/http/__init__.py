"""The HTTP convention the gateway and the catalog service share: one `ApiError` and its
OpenAI-style body `{"error": {"message", "type", "code", "param"}}` (`errors.py`), the body's
OpenAPI model (`error_schema.py`), the exception handlers that turn every failure into that
body (`handlers.py`), and the Bearer API-key check and route dependency (`api_keys.py`).
Each service builds its routers as `create_router(...)` factories and mounts them in its
`create_app`; nothing here holds state at import time."""
