"""Offline recommendation quality against a running gateway (`widebeam eval`).

Reads evaluation samples — our JSONL of item histories (``histories.jsonl`` of `widebeam demo
build`) or a RecIF-Bench parquet (OpenOneRec's ``messages`` + ``metadata`` rows) — sends them
concurrently (`/v1/recommend` for histories, `/v1/chat/completions` for RecIF prompts), and
reports hit / recall / NDCG / MRR at K, invalid-SID and duplicate rates, QPS and latency
percentiles as a markdown table and JSON.
"""
