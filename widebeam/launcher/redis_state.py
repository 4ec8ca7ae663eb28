"""Where the launcher's redis-server keeps its data, and its configuration.

With persistence (the default) the data lives in `STATE_DIR/redis/` as an append-only file
(fsync'ed every second), so the catalogs, their versions and the batch jobs (records, rows,
results and queued broker messages) of one `widebeam up` are there again after the next
start. One launcher at a time owns a state directory (a lock file, released however the
launcher ends). Without persistence the same append-only file sits in the run's temporary
directory: a redis-server that crashes is restarted with its data, but nothing outlives the
launcher."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from widebeam.launcher.readiness import StartupError

STATE_DIR_ENV = "WIDEBEAM_STATE_DIR"


def default_state_dir() -> Path:
    """$WIDEBEAM_STATE_DIR, else $XDG_STATE_HOME/widebeam, else ~/.local/state/widebeam."""
    if os.environ.get(STATE_DIR_ENV):
        return Path(os.environ[STATE_DIR_ENV])
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base) / "widebeam"


class StateDirLock:
    """An exclusive lock on `state_dir` for this process's life (or until `release`)."""

    def __init__(self, state_dir: Path) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path = state_dir / "up.lock"
        self._file: IO[str] | None = self.path.open("a")
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.release()
            raise StartupError(
                f"another `widebeam up` uses the state directory {state_dir}: stop it, or pass "
                "--state-dir DIR or --no-persist"
            ) from None

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing drops the lock
            self._file = None


def redis_config(port: int, password: str, data_dir: Path) -> str:
    """redis.conf text: loopback only, the run's password, an append-only file in `data_dir`
    (no RDB snapshots: one format to restore from)."""
    return (
        f"port {port}\nbind 127.0.0.1\nrequirepass {password}\ndir {data_dir}\n"
        'save ""\nappendonly yes\nappendfsync everysec\n'
    )
