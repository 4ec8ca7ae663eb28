"""`ClientGuardSettings`: the settings fields of a service's guard against slow and hostile
clients, shared by the gateway's and the catalog service's settings.

Deadlines and connection caps (`connections/`, `ConnectionPolicy.from_settings`) and a log rate
limit (`log_rate_limit.py`), so idle or dribbling connections cannot exhaust the server or its
log. A service's settings class inherits these fields and keeps its own `model_config` (its
environment prefix)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings


class ClientGuardSettings(BaseSettings):
    header_timeout_s: float = Field(
        10.0, gt=0, description="seconds a client has to send a request's headers; then 408, closed"
    )
    body_timeout_s: float = Field(
        30.0, gt=0, description="longest pause in a request body being read; then 408, closed"
    )
    keep_alive_timeout_s: float = Field(
        5.0, gt=0, description="an idle kept-alive connection is closed after this"
    )
    max_connections: int = Field(
        2048, ge=1, description="open connections in all; beyond: 503 (capped by ulimit -n)"
    )
    max_connections_per_client: int = Field(
        256,
        ge=1,
        description="open connections from one client address; beyond: 429 "
        "(behind a proxy, where all clients share its address: raise it to max_connections)",
    )
    log_rate_limit: int = Field(
        20, ge=1, description="log records of one kind let through per log_rate_interval_s"
    )
    log_rate_interval_s: float = Field(60.0, gt=0, description="window of log_rate_limit")
