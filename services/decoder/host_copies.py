"""Copies between host and device that queue instead of waiting (pinned host memory)."""

from __future__ import annotations

import torch


def to_host_async(t: torch.Tensor) -> torch.Tensor:
    """Queue a device-to-host copy into pinned memory; valid once the stream passes it (wait on
    an event recorded after it). CPU tensors are returned as they are."""
    if not t.is_cuda:
        return t
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    return host.copy_(t, non_blocking=True)


def to_device_async(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Queue a host-to-device copy (pinned first, so the host moves on)."""
    if device.type == "cuda":
        host = host.pin_memory()
    return host.to(device, non_blocking=True)
