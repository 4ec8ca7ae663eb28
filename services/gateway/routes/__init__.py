"""One module per API, each with a `create_router()` factory that `app.create_app` mounts."""
