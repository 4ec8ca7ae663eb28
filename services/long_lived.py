"""What a server's start-up made lives as long as the process: keep it out of the collector.

A service process holds 100k+ container objects after start-up (imported modules, the
FastAPI app's routes and pydantic models, a decoder's model and runner); every full pass of
the cyclic garbage collector walks all of them, and the passes come as requests allocate:
a gateway's full pass while serving took 98-159 ms on this project's machine
(`bench/gateway_gc.py`), its event loop stopped meanwhile, and every request in flight waited
it out. `gc.freeze()` once start-up is done
moves them to the permanent generation, so later passes walk only what serving allocated.
"""

from __future__ import annotations

import gc


def freeze_start_up_objects() -> None:
    """Call once a server is ready to serve, after what it keeps for its life exists."""
    gc.freeze()
