"""A beam step's outputs for B requests, packed into four tensors.

Everything a step produces — the selection, the new search state, the trie nodes and the stop
flags — lives in one fp32, one int64 and two bool tensors. A captured step writes them into its
static buffers and the host clones four tensors per replay; the next step loads its state with
four copies; the host copies of a step (`host_step.py`) are two.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from widebeam.services.decoder.search.beam_step import BeamState, StepResult

# Row order within each packed tensor (dimension 1).
FLOATS = ("logprobs", "fin_scores", "fin_cum", "fin_token_logprob", "running_scores")
INTS = ("parents", "tokens", "fin_step", "fin_parent", "fin_token", "returnable", "nodes")
FLAGS = ("running_ghost", "fin_done", "fin_ghost")
REQUEST_FLAGS = ("heuristic_open", "done")


@dataclass(frozen=True)
class StepOutputs:
    floats: torch.Tensor  # [B, 5, k] fp32 (FLOATS)
    ints: torch.Tensor  # [B, 7, k] int64 (INTS); nodes are -1 when unconstrained
    flags: torch.Tensor  # [B, 3, k] bool (FLAGS)
    request_flags: torch.Tensor  # [B, 2] bool (REQUEST_FLAGS)

    @classmethod
    def pack(cls, result: StepResult, nodes: torch.Tensor | None) -> StepOutputs:
        """nodes: [B, k] int64 each new row's trie node (None: unconstrained)."""
        st = result.state
        returnable = st.fin_done & ~st.fin_ghost & torch.isfinite(st.fin_scores)
        if nodes is None:
            nodes = torch.full_like(result.parents, -1)
        floats = (result.logprobs, st.fin_scores, st.fin_cum, st.fin_token_logprob)
        ints = (result.parents, result.tokens, st.fin_step, st.fin_parent, st.fin_token)
        return cls(
            torch.stack((*floats, st.running_scores), dim=1),
            torch.stack((*ints, returnable.to(torch.int64), nodes), dim=1),
            torch.stack((st.running_ghost, st.fin_done, st.fin_ghost), dim=1),
            torch.stack((st.heuristic_open, result.done), dim=1),
        )

    @classmethod
    def empty(cls, batch: int, k: int, device: torch.device) -> StepOutputs:
        return cls(
            torch.zeros((batch, len(FLOATS), k), dtype=torch.float32, device=device),
            torch.zeros((batch, len(INTS), k), dtype=torch.int64, device=device),
            torch.zeros((batch, len(FLAGS), k), dtype=torch.bool, device=device),
            torch.zeros((batch, len(REQUEST_FLAGS)), dtype=torch.bool, device=device),
        )

    @property
    def batch_size(self) -> int:
        return self.floats.shape[0]

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.floats, self.ints, self.flags, self.request_flags

    def head(self, batch: int) -> StepOutputs:
        """The first `batch` requests, copied (a captured step's buffers are overwritten by
        its next replay)."""
        return StepOutputs(*(t[:batch].clone() for t in self.tensors()))

    def load(self, other: StepOutputs) -> None:
        """Copy `other` into this one's first `other.batch_size` requests."""
        for mine, theirs in zip(self.tensors(), other.tensors(), strict=True):
            mine[: theirs.shape[0]].copy_(theirs)

    def load_state(self, state: BeamState) -> None:
        """Copy a search state into the state rows of the first `state.batch_size` requests."""
        b = state.batch_size
        for name in ("fin_scores", "fin_cum", "fin_token_logprob", "running_scores"):
            self.floats[:b, FLOATS.index(name)].copy_(getattr(state, name))
        for name in ("fin_step", "fin_parent", "fin_token"):
            self.ints[:b, INTS.index(name)].copy_(getattr(state, name))
        for i, name in enumerate(FLAGS):
            self.flags[:b, i].copy_(getattr(state, name))
        self.request_flags[:b, 0].copy_(state.heuristic_open)

    @cached_property
    def state(self) -> BeamState:  # [B, k] views
        def f(name: str) -> torch.Tensor:
            return self.floats[:, FLOATS.index(name)]

        def i(name: str) -> torch.Tensor:
            return self.ints[:, INTS.index(name)]

        return BeamState(
            running_scores=f("running_scores"),
            running_ghost=self.flags[:, 0],
            fin_scores=f("fin_scores"),
            fin_done=self.flags[:, 1],
            fin_ghost=self.flags[:, 2],
            fin_step=i("fin_step"),
            fin_parent=i("fin_parent"),
            fin_token=i("fin_token"),
            fin_cum=f("fin_cum"),
            fin_token_logprob=f("fin_token_logprob"),
            heuristic_open=self.request_flags[:, 0],
        )

    @property
    def parents(self) -> torch.Tensor:  # [B, k] int64
        return self.ints[:, 0]

    @property
    def tokens(self) -> torch.Tensor:  # [B, k] int64
        return self.ints[:, 1]

    @property
    def nodes(self) -> torch.Tensor:  # [B, k] int64
        return self.ints[:, 6]

    @property
    def done(self) -> torch.Tensor:  # [B] bool
        return self.request_flags[:, 1]
