"""Connection guard of both HTTP services: what a client may do with a TCP connection before it
is dropped. `policy.py` holds the limits (`ConnectionPolicy`, built from a service's settings),
`counts.py` the open connections per client address and in all, `raw_response.py` the few
answers written before or instead of the app's (408, 429, 503), and `protocol.py` uvicorn's h11
protocol with those limits enforced (`guarded_protocol(policy)`, passed as uvicorn's `http=`):
a request head must arrive within a deadline (slowloris), a body may not stall, a client and the
server in all have a connection cap, and an answered request's unread body is not read on."""

from widebeam.services.http.connections.policy import ConnectionPolicy, ConnectionSettings
from widebeam.services.http.connections.protocol import GuardedH11Protocol, guarded_protocol

__all__ = ["ConnectionPolicy", "ConnectionSettings", "GuardedH11Protocol", "guarded_protocol"]
