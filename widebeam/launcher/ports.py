"""The ports `widebeam up` binds by default, one per service, and the check that a fixed one is
free before anything starts.

The gateway, catalog service and decoder defaults are the services' own (their settings'
`port` defaults: what `widebeam catalog upload`, the docs and the compose files assume). The
launcher's redis-server takes 6380, not Redis's usual 6379, so it starts next to a system
Redis instead of failing on its port. Metrics have no port of their own: the gateway and the
catalog service serve `/metrics` on theirs. Every port is overridable; 0 means a free one."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from widebeam.launcher.readiness import StartupError
from widebeam.services.catalog.service.settings import CatalogSettings
from widebeam.services.decoder.server.settings import DecoderSettings
from widebeam.services.gateway.settings import GatewaySettings


def _default_port(settings: type[CatalogSettings | DecoderSettings | GatewaySettings]) -> int:
    return int(settings.model_fields["port"].default)


@dataclass(frozen=True)
class DefaultPorts:
    gateway: int = _default_port(GatewaySettings)
    catalog: int = _default_port(CatalogSettings)
    decoder: int = _default_port(DecoderSettings)
    redis: int = 6380


DEFAULT_PORTS = DefaultPorts()


def port_in_use(host: str, port: int) -> bool:
    """True when `port` cannot be bound on `host` now (another process holds it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as sock:
        # As a server binds it: a port in TIME_WAIT after the last run is not "in use".
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def check_free(wanted: dict[str, tuple[str, int, str]]) -> None:
    """`wanted`: service -> (host, port, flag). Raises StartupError naming every fixed port that
    another process holds, with the flag that moves it (0, a free port, is never checked)."""
    busy = [
        f"{service} port {port} ({flag})"
        for service, (host, port, flag) in wanted.items()
        if port and port_in_use(host, port)
    ]
    if busy:
        raise StartupError(
            f"in use by another process: {', '.join(busy)}; stop it, or pass another port "
            "(0: a free one) — another `widebeam up` may be running"
        )
