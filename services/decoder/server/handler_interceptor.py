"""`HandlerInterceptor`: a gRPC server interceptor that looks up a call's method handler and
answers with it or with a handler built around it (the token check of `token_auth.py`, the
malformed-request guard of `wire.py`). A method the server does not have passes untouched, so
grpcio answers it UNIMPLEMENTED as usual."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Awaitable, Callable

import grpc


class HandlerInterceptor(grpc.aio.ServerInterceptor):
    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None:
            return handler
        return self.serving(handler, details)

    @abstractmethod
    def serving(
        self, handler: grpc.RpcMethodHandler, details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler:
        """The handler that answers this call: `handler` itself or one built around it."""
