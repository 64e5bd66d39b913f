"""A linear-chain CRF (Lafferty et al. 2001) in plain torch: log-likelihood by the forward algorithm, Viterbi.

Scores of a tag path y over emissions E (T, C):

    s(y) = start[y_0] + sum_t E[t, y_t] + sum_{t>0} trans[y_{t-1}, y_t] + end[y_{T-1}]
    log p(y | E) = s(y) - logsumexp_{y'} s(y')

Batches are right-padded: `mask` (B, T) is True on a prefix of each row (use `compact` to move scattered valid
positions to the front). Rows may be empty (mask all False): their log-likelihood is 0 and their path empty.
"""

from __future__ import annotations

import torch
from torch import nn


def compact(mask: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Move the positions where `mask` is True to the front of each row, keeping their order.

    Returns (compact_mask, index, *compact_tensors); `index` (B, T) maps compact position -> original position.
    """
    # A stable sort of (not mask) puts True first without reordering within each group.
    order = torch.sort((~mask).to(torch.int8), dim=1, stable=True).indices  # (B, T)
    out = [torch.gather(mask, 1, order), order]
    for t in tensors:
        idx = order.view(*order.shape, *([1] * (t.dim() - 2))).expand(*order.shape, *t.shape[2:])
        out.append(torch.gather(t, 1, idx))
    return tuple(out)


class LinearChainCRF(nn.Module):
    """CRF over `num_tags` tags. `forward(emissions, mask, tags)` returns the mean negative log-likelihood;
    `forward(emissions, mask)` (no tags) returns Viterbi paths (B, T), -1 where mask is False."""

    def __init__(self, num_tags: int):
        super().__init__()
        if num_tags < 1:
            raise ValueError(f"num_tags must be positive, got {num_tags}")
        self.num_tags = num_tags
        self.start_transitions = nn.Parameter(torch.zeros(num_tags))
        self.end_transitions = nn.Parameter(torch.zeros(num_tags))
        self.transitions = nn.Parameter(torch.zeros(num_tags, num_tags))  # [from, to]

    def forward(
        self, emissions: torch.Tensor, mask: torch.Tensor | None = None, tags: torch.Tensor | None = None
    ) -> torch.Tensor:
        if emissions.dim() != 3 or emissions.shape[-1] != self.num_tags:
            raise ValueError(f"emissions must be (batch, seq, {self.num_tags}), got {tuple(emissions.shape)}")
        if mask is None:
            mask = torch.ones(emissions.shape[:2], dtype=torch.bool, device=emissions.device)
        mask = mask.bool()
        if mask.shape != emissions.shape[:2]:
            raise ValueError(f"mask shape {tuple(mask.shape)} != emissions {tuple(emissions.shape[:2])}")
        if bool((mask[:, 1:] & ~mask[:, :-1]).any()):  # a True after a False
            raise ValueError("mask must be True on a prefix of each row (see crf.compact)")
        if tags is None:
            return self.viterbi(emissions, mask)
        return -self.log_likelihood(emissions, mask, tags).mean()

    def log_likelihood(self, emissions: torch.Tensor, mask: torch.Tensor, tags: torch.Tensor) -> torch.Tensor:
        """log p(tags | emissions) per row (B,), computed in float32."""
        emissions = emissions.float()
        if bool(((tags < 0) | (tags >= self.num_tags))[mask].any()):
            raise ValueError(f"tags must lie in [0, {self.num_tags}) at every unmasked position")
        tags = tags.clamp(0, self.num_tags - 1)  # masked positions may hold -100
        return self._path_score(emissions, mask, tags) - self._log_partition(emissions, mask)

    def _path_score(self, emissions: torch.Tensor, mask: torch.Tensor, tags: torch.Tensor) -> torch.Tensor:
        B, T, _ = emissions.shape
        m = mask.float()
        emit = emissions.gather(2, tags.unsqueeze(2)).squeeze(2)  # (B, T)
        score = self.start_transitions[tags[:, 0]] * m[:, 0] + (emit * m).sum(1)
        if T > 1:
            trans = self.transitions[tags[:, :-1], tags[:, 1:]]  # (B, T-1)
            score = score + (trans * m[:, 1:]).sum(1)
        lengths = mask.sum(1)
        last = tags.gather(1, (lengths - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
        return score + self.end_transitions[last] * (lengths > 0).float()

    def _log_partition(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        alpha = self.start_transitions + emissions[:, 0]  # (B, C)
        for t in range(1, emissions.shape[1]):
            # (B, C_from, 1) + (C_from, C_to) + (B, 1, C_to) -> logsumexp over C_from
            nxt = torch.logsumexp(alpha.unsqueeze(2) + self.transitions + emissions[:, t].unsqueeze(1), dim=1)
            alpha = torch.where(mask[:, t : t + 1], nxt, alpha)
        log_z = torch.logsumexp(alpha + self.end_transitions, dim=1)
        return log_z * (mask.sum(1) > 0).float()

    @torch.no_grad()
    def viterbi(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Best tag path per row, (B, T) long, -1 at masked positions.

        The backtrack runs over time steps for all rows at once (no Python loop per row or token): a row whose
        path ends at step n enters the backtrack at t = n - 1 with its best last tag, and a row's pointers are
        followed only while t < its length."""
        emissions = emissions.float()
        B, T, C = emissions.shape
        score = self.start_transitions + emissions[:, 0]  # (B, C)
        history = []
        for t in range(1, T):
            best, idx = (score.unsqueeze(2) + self.transitions).max(dim=1)  # (B, C_to)
            history.append(idx)
            score = torch.where(mask[:, t : t + 1], best + emissions[:, t], score)
        score = score + self.end_transitions
        lengths = mask.sum(1)
        paths = torch.full((B, T), -1, dtype=torch.long, device=emissions.device)
        tag = score.argmax(1)  # (B,): the best last tag, valid once t reaches a row's last step
        for t in range(T - 1, -1, -1):
            if t < T - 1:  # follow the pointer from step t + 1 where that step is inside the row
                inside = (t + 1) < lengths
                back = history[t].gather(1, tag.unsqueeze(1)).squeeze(1)
                tag = torch.where(inside, back, tag)
            paths[:, t] = torch.where(t < lengths, tag, paths[:, t])
        return paths


__all__ = ["LinearChainCRF", "compact"]
