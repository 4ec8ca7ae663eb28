"""The HTTP convention the gateway and the catalog service share: one `ApiError` and its
OpenAI-style body `{"error": {"message", "type", "code", "param"}}` (`errors.py`), the body's
OpenAPI model (`error_schema.py`), the exception handlers that turn every failure into that
body (`handlers.py`), the Bearer API-key check and route dependency (`api_keys.py`), the one
strict JSON parser of request bodies and JSON-valued options (`strict_json.py`) and the route
class that makes FastAPI read bodies with it (`strict_json_route.py`). Against slow and hostile
clients: the connection guard (`connections/`: head and body deadlines, connection caps per
client address and in all, as uvicorn's protocol), the middleware that answers a keyless body
401 before it is read (`key_before_body.py`), the log rate limit (`log_rate_limit.py`), and
the settings fields of all three that both services' settings inherit
(`client_guard_settings.py`).
Each service builds its routers as `create_router(...)` factories and mounts them in its
`create_app`; nothing here holds state at import time."""
