"""A beam step's outputs for B requests, packed into four tensors, and their layout.

Everything a step produces — the selection, the new search state, the trie nodes and the stop
flags — lives in one fp32, one int64 and two bool tensors. A captured step writes them into its
static buffers and the host clones four tensors per replay; the next step loads its state with
four copies; the host copies of a step (`beam_host_step.py`) are two. The rows of each packed
tensor (its dimension 1) are named once, here (`FloatRow`, `IntRow`, `FlagRow`, `RequestFlag`);
every reader indexes them by those names (plain ints: views, no copy, fine inside a capture).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from functools import cached_property

import torch

from widebeam.services.decoder.search.beam_step import (
    NEG_INF_SCORE,
    BeamState,
    StepResult,
    state_tensors,
)


class FloatRow(IntEnum):
    """Rows of `StepOutputs.floats` [B, len(FloatRow), k] fp32."""

    LOGPROBS = 0  # each new row's token's own log-prob
    FIN_SCORES = 1  # finished slots: length-penalised score (-inf: empty slot)
    FIN_CUM = 2  # finished slots: cumulative log-prob
    FIN_TOKEN_LOGPROB = 3  # finished slots: their last token's log-prob
    RUNNING_SCORES = 4


class IntRow(IntEnum):
    """Rows of `StepOutputs.ints` [B, len(IntRow), k] int64."""

    PARENTS = 0  # the row (of the previous step) each new row extends
    TOKENS = 1  # the token each new row appends
    FIN_STEP = 2  # finished slots: index of the last token
    FIN_PARENT = 3  # finished slots: the row they extend at that step
    FIN_TOKEN = 4  # finished slots: their last token
    RETURNABLE = 5  # finished slots: 1 if a real, finite hypothesis (not a ghost or empty slot)
    NODES = 6  # each new row's trie node (-1 when unconstrained)


class FlagRow(IntEnum):
    """Rows of `StepOutputs.flags` [B, len(FlagRow), k] bool."""

    RUNNING_GHOST = 0
    FIN_DONE = 1
    FIN_GHOST = 2


class RequestFlag(IntEnum):
    """Columns of `StepOutputs.request_flags` [B, len(RequestFlag)] bool."""

    HEURISTIC_OPEN = 0
    DONE = 1


@dataclass(frozen=True)
class StepOutputs:
    floats: torch.Tensor  # [B, len(FloatRow), k] fp32
    ints: torch.Tensor  # [B, len(IntRow), k] int64
    flags: torch.Tensor  # [B, len(FlagRow), k] bool
    request_flags: torch.Tensor  # [B, len(RequestFlag)] bool

    @classmethod
    def pack(cls, result: StepResult, nodes: torch.Tensor | None) -> StepOutputs:
        """nodes: [B, k] int64 each new row's trie node (None: unconstrained)."""
        st = result.state
        returnable = st.fin_done & ~st.fin_ghost & torch.isfinite(st.fin_scores)
        if nodes is None:
            nodes = torch.full_like(result.parents, -1)
        floats = {
            FloatRow.LOGPROBS: result.logprobs,
            FloatRow.FIN_SCORES: st.fin_scores,
            FloatRow.FIN_CUM: st.fin_cum,
            FloatRow.FIN_TOKEN_LOGPROB: st.fin_token_logprob,
            FloatRow.RUNNING_SCORES: st.running_scores,
        }
        ints = {
            IntRow.PARENTS: result.parents,
            IntRow.TOKENS: result.tokens,
            IntRow.FIN_STEP: st.fin_step,
            IntRow.FIN_PARENT: st.fin_parent,
            IntRow.FIN_TOKEN: st.fin_token,
            IntRow.RETURNABLE: returnable.to(torch.int64),
            IntRow.NODES: nodes,
        }
        flags = {
            FlagRow.RUNNING_GHOST: st.running_ghost,
            FlagRow.FIN_DONE: st.fin_done,
            FlagRow.FIN_GHOST: st.fin_ghost,
        }
        request_flags = {
            RequestFlag.HEURISTIC_OPEN: st.heuristic_open,
            RequestFlag.DONE: result.done,
        }
        return cls(
            torch.stack([floats[row] for row in FloatRow], dim=1),
            torch.stack([ints[row] for row in IntRow], dim=1),
            torch.stack([flags[row] for row in FlagRow], dim=1),
            torch.stack([request_flags[column] for column in RequestFlag], dim=1),
        )

    @classmethod
    def empty(cls, batch: int, k: int, device: torch.device) -> StepOutputs:
        return cls(
            torch.zeros((batch, len(FloatRow), k), dtype=torch.float32, device=device),
            torch.zeros((batch, len(IntRow), k), dtype=torch.int64, device=device),
            torch.zeros((batch, len(FlagRow), k), dtype=torch.bool, device=device),
            torch.zeros((batch, len(RequestFlag)), dtype=torch.bool, device=device),
        )

    @classmethod
    def initial(cls, batch: int, k: int, device: torch.device) -> StepOutputs:
        """Outputs whose state rows are `BeamState.initial(batch, k)` (the other rows zero):
        fresh requests' state in four tensors, so a step loads it as it loads a previous
        step's outputs."""
        outputs = cls.empty(batch, k, device)
        outputs.floats[:, FloatRow.RUNNING_SCORES, 1:] = NEG_INF_SCORE
        outputs.floats[:, FloatRow.FIN_SCORES] = float("-inf")
        outputs.flags[:, FlagRow.RUNNING_GHOST, 1:] = True
        outputs.request_flags[:, RequestFlag.HEURISTIC_OPEN] = True
        return outputs

    @classmethod
    def gather(cls, sources: list[tuple[StepOutputs, int]]) -> StepOutputs:
        """Row `row` of each `(outputs, row)` in order, as one batch: views when they are
        consecutive rows of one outputs, else one concatenation per packed tensor (runs of
        consecutive rows taken as one slice)."""
        runs: list[tuple[StepOutputs, int, int]] = []  # (outputs, first row, end row)
        for outputs, row in sources:
            if runs and runs[-1][0] is outputs and runs[-1][2] == row:
                runs[-1] = (outputs, runs[-1][1], row + 1)
            else:
                runs.append((outputs, row, row + 1))
        parts = [[t[first:end] for t in outputs.tensors()] for outputs, first, end in runs]
        if len(parts) == 1:
            return cls(*parts[0])
        return cls(*(torch.cat(column) for column in zip(*parts, strict=True)))

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
        for mine, theirs in zip(state_tensors(self.state), state_tensors(state), strict=True):
            mine[:b].copy_(theirs)

    @cached_property
    def state(self) -> BeamState:  # [B, k] views of the state rows ([B] for heuristic_open)
        # One unbind per packed tensor: every cohort step takes its state apart, and eleven
        # separate indexings cost more than the views.
        floats, ints = self.floats.unbind(1), self.ints.unbind(1)
        flags, request_flags = self.flags.unbind(1), self.request_flags.unbind(1)
        return BeamState(
            running_scores=floats[FloatRow.RUNNING_SCORES],
            running_ghost=flags[FlagRow.RUNNING_GHOST],
            fin_scores=floats[FloatRow.FIN_SCORES],
            fin_done=flags[FlagRow.FIN_DONE],
            fin_ghost=flags[FlagRow.FIN_GHOST],
            fin_step=ints[IntRow.FIN_STEP],
            fin_parent=ints[IntRow.FIN_PARENT],
            fin_token=ints[IntRow.FIN_TOKEN],
            fin_cum=floats[FloatRow.FIN_CUM],
            fin_token_logprob=floats[FloatRow.FIN_TOKEN_LOGPROB],
            heuristic_open=request_flags[RequestFlag.HEURISTIC_OPEN],
        )

    @property
    def parents(self) -> torch.Tensor:  # [B, k] int64
        return self.ints.select(1, IntRow.PARENTS)

    @property
    def tokens(self) -> torch.Tensor:  # [B, k] int64
        return self.ints.select(1, IntRow.TOKENS)

    @property
    def nodes(self) -> torch.Tensor:  # [B, k] int64
        return self.ints.select(1, IntRow.NODES)

    @property
    def done(self) -> torch.Tensor:  # [B] bool
        return self.request_flags.select(1, RequestFlag.DONE)
