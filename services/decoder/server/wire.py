"""Malformed protobuf on the wire is the client's fault: INVALID_ARGUMENT, not UNKNOWN.

grpcio deserializes a request before the servicer sees it and answers a parse failure with
UNKNOWN plus an ERROR traceback in the log. This interceptor takes over the parse of every
async unary-unary method, so corrupt bytes get INVALID_ARGUMENT and no traceback."""

from __future__ import annotations

import inspect
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from widebeam.services.decoder.server.handler_interceptor import HandlerInterceptor


class MalformedRequestInterceptor(HandlerInterceptor):
    def serving(
        self, handler: grpc.RpcMethodHandler, details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler:
        if (
            handler.unary_unary is None
            or handler.request_deserializer is None
            or not inspect.iscoroutinefunction(handler.unary_unary)
        ):
            return handler
        parse, behavior = handler.request_deserializer, handler.unary_unary
        method = details.method

        async def guarded(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
            try:
                request = parse(raw)
            except DecodeError:
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT, f"{method}: malformed protobuf message"
                )
            return await behavior(request, context)

        return grpc.unary_unary_rpc_method_handler(
            guarded, request_deserializer=None, response_serializer=handler.response_serializer
        )
