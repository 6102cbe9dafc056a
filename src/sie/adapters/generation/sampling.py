"""Per-request sampling inside transformers' continuous batching.

The batching manager has one sampler for every request it runs (``do_sample`` and the warpers are set
when it is built), while each request of ours carries its own temperature, nucleus, seed, penalties,
logit bias, logprobs and grammar. ``RowSamplers`` is a continuous-batching logits processor (the
library's own extension point: a per-row ``int32`` argument, here the request's slot) that picks each
row's next token the request's way and leaves the row with that token alone at the maximum; the
manager runs greedy (``do_sample=False``), so its ``argmax`` takes exactly the token chosen here. A
greedy request with none of the extras is left untouched: its token is the library's own ``argmax``,
which is what makes greedy output equal to ``generate``'s token for token. (``RowSamplers`` lives in
``row_samplers``: it subclasses the library's processor, whose import pulls transformers' whole
generation stack, and the server imports this module's types whether or not it serves a generator.)
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

import torch

NO_SLOT = -1


class TokenConstraint(Protocol):
    """A grammar the output must follow (``grammar.Constraint``): which tokens may come next, and the
    token that was chosen."""

    def allowed(self, vocab_size: int) -> torch.Tensor | None: ...

    def accept(self, token: int) -> None: ...


@dataclass(frozen=True)
class Sampling:
    """One request's decoding parameters, already checked (``None``: the model's default)."""

    temperature: float = 0.0  # 0 is greedy
    top_p: float = 1.0
    top_k: int = 0  # 0: all tokens
    seed: int | None = None
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0  # transformers' (CTRL's): every token of the prompt and output
    logit_bias: dict[int, float] = field(default_factory=dict)
    top_logprobs: int | None = None  # None: no logprobs; 0: the chosen token's alone

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass(frozen=True)
class TokenLogprob:
    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


class RowSampler:
    """The sampling state of one running request: its generator, token counts and grammar."""

    def __init__(
        self,
        sampling: Sampling,
        constraint: TokenConstraint | None,
        eos: tuple[int, ...],
        prompt: list[int] | None = None,
    ) -> None:
        self.sampling = sampling
        self._prompt = frozenset(prompt or ()) if sampling.repetition_penalty != 1.0 else frozenset()
        self.constraint = constraint
        self._eos = eos
        self._counts: Counter[int] = Counter()
        self._generator: torch.Generator | None = None
        if not sampling.greedy and sampling.seed is not None:
            self._generator = torch.Generator().manual_seed(sampling.seed & 0xFFFF_FFFF_FFFF_FFFF)
        self.logprobs: list[TokenLogprob] = []  # one per token chosen, read by ``logprobs_through``
        self._reported = 0
        s = sampling
        plain = (
            s.greedy
            and constraint is None
            and s.frequency_penalty == 0.0
            and s.presence_penalty == 0.0
            and s.repetition_penalty == 1.0
            and s.top_logprobs is None
        )
        self.untouched = plain and not s.logit_bias
        # Greedy with a bias alone: the biased row's maximum is the token, which the library's argmax
        # takes with no pick of ours (nothing else reads the tokens chosen).
        self._bias_only = plain and bool(s.logit_bias)
        self._bias: tuple[torch.Tensor, torch.Tensor] | None = None  # ids, values; on the row's device

    def logprobs_through(self, tokens: int) -> list[TokenLogprob]:
        """The logprobs of the first ``tokens`` tokens not handed out before: the sampler may be
        tokens ahead of the output its stream reads (outputs wait for the loop)."""
        fresh = self.logprobs[self._reported : tokens]
        self._reported += len(fresh)
        return fresh

    def choose(self, row: torch.Tensor) -> None:
        """Pick this row's token and leave it the row's only finite value (in place); a greedy row
        with a bias alone is left biased, its maximum the token."""
        s = self.sampling
        if s.logit_bias:
            if self._bias is None or self._bias[0].device != row.device:
                ids = torch.tensor(list(s.logit_bias), dtype=torch.long, device=row.device)
                self._bias = ids, torch.tensor(list(s.logit_bias.values()), device=row.device)
            ids, values = self._bias
            row.index_add_(0, ids, values.to(row.dtype))
            if self._bias_only:
                return
        if self._counts and (s.frequency_penalty or s.presence_penalty):
            ids = torch.tensor(list(self._counts), dtype=torch.long, device=row.device)
            counts = torch.tensor(list(self._counts.values()), dtype=row.dtype, device=row.device)
            row.index_add_(0, ids, -(counts * s.frequency_penalty + s.presence_penalty))
        if s.repetition_penalty != 1.0:
            ids = torch.tensor(
                sorted(self._prompt | self._counts.keys()), dtype=torch.long, device=row.device
            )
            if ids.numel():
                seen = row[ids]
                row[ids] = torch.where(seen > 0, seen / s.repetition_penalty, seen * s.repetition_penalty)
        if self.constraint is not None:
            allowed = self.constraint.allowed(row.numel())
            if allowed is not None:
                row.masked_fill_(~allowed.to(row.device), -math.inf)
        token = self._pick(row)
        if s.top_logprobs is not None:
            self.logprobs.append(self._logprob(row, token, s.top_logprobs))
        row.fill_(-math.inf)
        row[token] = 0.0
        self._counts[token] += 1
        if self.constraint is not None:
            self.constraint.accept(token)

    def _pick(self, row: torch.Tensor) -> int:
        s = self.sampling
        if s.greedy:
            return int(torch.argmax(row))
        scores = row / s.temperature
        if 0 < s.top_k < scores.numel():
            kth = torch.topk(scores, s.top_k).values[-1]
            scores = scores.masked_fill(scores < kth, -math.inf)
        probs = torch.softmax(scores, dim=-1)
        if s.top_p < 1.0:
            ordered, order = torch.sort(probs, descending=True)
            before = torch.cumsum(ordered, dim=-1) - ordered
            ordered = ordered.masked_fill(before >= s.top_p, 0.0)
            probs = torch.zeros_like(probs).scatter_(0, order, ordered)
        return int(torch.multinomial(probs.float().cpu(), 1, generator=self._generator))

    @staticmethod
    def _logprob(row: torch.Tensor, token: int, top: int) -> TokenLogprob:
        logprobs = torch.log_softmax(row.float(), dim=-1)
        best: tuple[tuple[int, float], ...] = ()
        if top:
            values, ids = torch.topk(logprobs, top)
            best = tuple(zip(ids.tolist(), values.tolist(), strict=True))
        return TokenLogprob(token, float(logprobs[token]), best)
