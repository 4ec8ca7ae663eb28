"""The gateway: the public REST API in front of the decoder replicas. `app.create_app` builds it;
`routes/` holds one router factory per API (`schemas/` their bodies); `recommender.py` is the one
recommend implementation, used by `/v1/recommend` and the batch worker alike; `decoder_pool.py` /
`decoder_info.py` call the decoders and read their GetInfo, the replica each call goes to chosen by
`replica_choice.py` (least outstanding work); `serving.py` runs the HTTP server as one process or
`--workers N` (`worker_header.py` names the one that answered); `batch/` runs recommend jobs in bulk
on Celery; `playground/` is the page served at `/`, `item_index.py` the items file it searches
(`/v1/items`). The OpenAI routes share `generation.py` (request -> decoder Generate -> choices),
`chat_template.py` (the model's template, rendered as transformers does), `served_models.py` (the
names `model` may give, default-constrained ones) and `streaming.py` (`stream: true` as Server-Sent
Events); SGLang's native `/generate` (`routes/generate.py`) runs through the same `generation.py`.
Errors, API keys and handlers follow `widebeam.services.http`."""
