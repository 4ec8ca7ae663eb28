"""The decoder: the engine (`engine.py`, configured by `config.py`) with its request types
(`requests/`), admission policy (`scheduler/`), search strategies (`search/`), device work
(`runner/`), KV cache (`kv/`), model (`model/`) and SID constraint (`constraint/`); its gRPC
server (`server/`, `proto/`, `security/`), the `widebeam generate` CLI (`cli_generate.py`) and
tiny test checkpoints (`testing/`). See docs/architecture.md for the map."""
