"""Which Redis errors mean "Redis cannot serve this now; the same command will work later".

Not only a lost connection: a Redis out of memory under `noeviction` refuses every write (OOM),
a replica refuses writes (READONLY), a restarting server is still loading its data (LOADING), a
failed snapshot stops writes (MISCONF), a long script blocks the server (BUSY). The job store
retries these like a dropped connection, the broker transport rides them out, and a chunk that
still meets one is handed back, never failed. Anything else (a wrong type, a bad argument) is a
bug or a misconfiguration: it is not retried command by command (NOSCRIPT in particular is
redis-py's own signal to load a script)."""

from __future__ import annotations

import redis

# redis-py maps these codes to their own classes (the code is then cut from the message).
TRANSIENT_TYPES: tuple[type[Exception], ...] = (
    redis.ConnectionError,  # BusyLoadingError (LOADING) and AuthenticationError included
    redis.TimeoutError,
    redis.exceptions.OutOfMemoryError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.TryAgainError,
    redis.exceptions.ClusterDownError,  # MASTERDOWN included
)
# Codes that reach us as a plain ResponseError, first word of its message.
TRANSIENT_CODES = frozenset({"MISCONF", "BUSY", "NOREPLICAS", "OOM", "READONLY", "LOADING"})
# What a client must catch so that `is_transient` gets to decide.
RETRIED_TYPES: tuple[type[Exception], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.ResponseError,
)


def error_code(error: redis.ResponseError) -> str:
    """The Redis error code (`MISCONF`, ...) of a reply, also when a pipeline wrapped it as
    `Command # 2 (...) of pipeline caused error: MISCONF ...`."""
    message = str(error)
    marker = "caused error: "
    if marker in message:
        message = message.split(marker, 1)[1]
    return message.split(" ", 1)[0]


def is_transient(error: BaseException) -> bool:
    if isinstance(error, TRANSIENT_TYPES):
        return True
    return isinstance(error, redis.ResponseError) and error_code(error) in TRANSIENT_CODES
