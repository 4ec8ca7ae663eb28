"""`StartedInWith`: a background component (a thread, a server) that a `with` block starts and
stops again on the way out, whatever ended the block. Its class says how to start and stop."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Self


class StartedInWith(ABC):
    @abstractmethod
    def start(self) -> Self:
        """Start the component; returns it, so `x = Thing(...).start()` reads as one step."""

    @abstractmethod
    def stop(self) -> None:
        """Stop the component and release what it holds."""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:  # stopped whatever ended the block
        self.stop()
