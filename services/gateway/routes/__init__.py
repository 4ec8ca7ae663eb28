"""One module per API, each with a `create_router()` factory that `app.create_app` mounts;
`openai_route` is what the OpenAI generation routes (completions, chat) share."""
