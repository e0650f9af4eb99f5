"""The latency scorer: the chance this request meets its objective on each backend.

From the latency model's predicted TTFT and TPOT (proxy/routing/latency.py) and the
request's objective (the policy's ``slo`` section, by model and class):

    P(meet) = P(TTFT <= objective) * P(TPOT <= objective)

each read off a log-logistic curve around the prediction, ``1 / (1 + (predicted /
objective) ** spread)`` (one half when the prediction sits on the objective; ``spread``
says how sure the model is), TPOT counting only when the request is expected to produce
more than one token. That chance counts relative to the best backend's, so under overload,
where every chance is small, the best one still stands out. A share ``latency_weight`` of
the score goes to low expected end-to-end latency for the expected output length (class
prior and ``max_tokens``): ``budget / (budget + TTFT + TPOT * (n - 1))`` with ``budget``
what the objective allows for n tokens, where TTFT more than ``wait_slack`` (a share of
the TTFT objective) over the fastest candidate's counts ``1 + wait_weight`` times: a user
waits for the first token with nothing to read, and among engines of like decode speed a
long prompt should take the one without a prefill queue; 8 in policies/default.yaml
brought the light-load TTFT p99 to within 10% of round-robin's for 1-2% of goodput there,
where by end-to-end time alone it queued behind other long prompts on the engine that
drafts them best (loadtests/README.md, issue 15). TTFT past both ``tail_from`` (a share of
the objective) and the fastest candidate's counts ``tail_weight`` times more again: the
light-load TTFT p99 is made by the longest prompts queued behind others, and only those
are moved to the engine that starts them soonest, a plain one included, while every
first token under the floor stays where its decode is fastest. It weighs only where the
fastest candidate's TTFT is within 0.8-2x the floor (``TAIL_BAND``): a shorter prompt's
first token is early anywhere, and beyond it the fleet is loaded; weighed there as well
it cost 1-3% of goodput at c256 (loadtests/README.md, issue 15). 64 past a tenth of the
objective in policies/default.yaml took the light-load TTFT p99 from 1.05x round-robin's
to 1.015x (means over six seeds), goodput kept. That share ranks the backends when all
of them (light load) or none of them (overload) are likely to meet the objective; the
batch a request joins, the prompts queued ahead of it and the prefills beside it are all
in the predictions, so load balance needs no separate vote. What the request costs the
others counts too: the score is divided by ``1 + neighbour_weight * harm``, the harm being
the decode delay its prefill imposes on the requests already on the backend (summed) over
a typical request's TPOT budget (``tpot_goal`` times typical output tokens): long prompts
go where few decodes would feel them. That harm grows with the requests on a backend, not
with the prompt tokens queued there: weighed at 1 it outweighed the prefill queue under
overload and crowded long prompts onto the backends with the fewest requests, as
least-loaded does; 0.25 by default (loadtests/README.md, issue 15). Break-even and
acceptance are inputs of the model too: speculation wins exactly where the measured
acceptance makes its step cheaper per token at the batch it would join. Optionally
(``saturated_below`` > 0; 0.5 in policies/default.yaml) the score moves towards the fewest
prompt tokens queued for prefill once even the best chance falls under that value, or,
under ``overflow`` and with no overload guard to hold or refuse the request, towards the
most.

The model keeps each backend's request-independent terms current between requests, as
arrays over the candidates (proxy/routing/latency.py), and a decision runs one compiled
loop over them (``latency_kernel.py``; loadtests/README.md, routing decision time).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from proxy.policy import Objective
from proxy.routing.fleet import BackendState
from proxy.routing.latency import FloatArray
from proxy.routing.scheduler.base import SchedulingContext
from proxy.routing.scheduler.latency_tail import TAIL_BAND


class LatencyScorer:
    name = "latency"

    def __init__(
        self,
        spread: float = 4.0,
        latency_weight: float = 0.25,
        neighbour_weight: float = 0.25,
        saturated_below: float = 0.0,
        prefix_cache: bool = False,
        wait_weight: float = 0.0,
        wait_slack: float = 0.0,
        tail_weight: float = 0.0,
        tail_from: float = 0.0,
        overflow: float = 0.0,
    ) -> None:
        if spread <= 0:
            raise ValueError("latency: spread must be > 0")
        if not 0.0 <= latency_weight <= 1.0:
            raise ValueError("latency: latency_weight must lie in [0, 1]")
        if neighbour_weight < 0:
            raise ValueError("latency: neighbour_weight must be >= 0")
        if not 0.0 <= saturated_below <= 1.0:
            raise ValueError("latency: saturated_below must lie in [0, 1]")
        if not 0.0 <= overflow <= saturated_below:
            raise ValueError("latency: overflow must lie in [0, saturated_below]")
        if wait_weight < 0:
            raise ValueError("latency: wait_weight must be >= 0")
        if wait_slack < 0:
            raise ValueError("latency: wait_slack must be >= 0")
        if tail_weight < 0:
            raise ValueError("latency: tail_weight must be >= 0")
        if tail_from < 0:
            raise ValueError("latency: tail_from must be >= 0")
        self.spread = spread
        self.wait_weight = wait_weight
        self.wait_slack = wait_slack
        self.tail_weight = tail_weight
        self.tail_from = tail_from
        self.latency_weight = latency_weight
        self.neighbour_weight = neighbour_weight
        self.saturated_below = saturated_below
        self.overflow = overflow
        self.prefix_cache = prefix_cache
        self._no_shares: FloatArray = np.zeros(0)
        # Imported (and so compiled, ~0.2 s, with numba's ~0.1 s import) where a policy
        # uses this scorer, not wherever the plugin registry is.
        from proxy.routing.scheduler import latency_kernel

        self._scores = latency_kernel.scores

    def score_all(
        self, ctx: SchedulingContext, backends: Sequence[BackendState]
    ) -> Sequence[float]:
        request = ctx.request
        objective = ctx.policy.slo.objective(request.model, request.label, request.tenant)
        tokens = ctx.latency.output_tokens(request.label, request.max_tokens)
        ttft_goal, tpot_goal = objective.ttft_ms / 1000.0, objective.tpot_ms / 1000.0
        later = tokens - 1.0 if tokens > 1.0 else 0.0
        harm = self.neighbour_weight / (tpot_goal * ctx.latency.typical_output_tokens())
        prompt = ctx.latency.prompt_tokens(request.label, request.prompt_bytes)
        terms = ctx.latency.terms(ctx.fleet, backends, request.label)
        # Over the candidates in one compiled loop (hot path: 64 backends): the chance
        # relative to the best backend's (under overload every chance is small, and the
        # best is still worth taking) plus the speed share, over 1 + the harm done to
        # the neighbours; ``rate`` backend by backend.
        n = len(terms.tpot)
        out = np.empty(n)
        shares = self._cached_shares(ctx, terms.places, n)
        best = self._scores(
            terms.ttft_base,
            terms.ttft_per_token,
            terms.tpot,
            terms.imposed_per_token,
            shares,
            float(prompt),
            ttft_goal,
            tpot_goal,
            self.spread,
            later,
            self.latency_weight,
            harm,
            self.wait_weight,
            self.wait_slack * ttft_goal,
            self.tail_weight,
            self.tail_from * ttft_goal,
            out,
        )
        scores: list[float] = out.tolist()
        if best < self.saturated_below:
            return self._saturated(ctx, backends, scores, best, prompt, shares)
        return scores

    def _cached_shares(
        self, ctx: SchedulingContext, places: Mapping[str, int], n: int
    ) -> FloatArray:
        """Each candidate's share of the prompt its engine likely has cached (0 without
        ``prefix_cache``, or where the prefix index knows of none), in the places of the
        candidates' terms."""
        found = ctx.cached_shares() if self.prefix_cache else None
        if not found:
            # The compiled loop only reads it: one array of zeros serves every decision
            # with nothing cached (most: short prompts are not looked up at all).
            if len(self._no_shares) != n:
                self._no_shares = np.zeros(n)
            return self._no_shares
        shares = np.zeros(n)
        for name, share in found.items():
            i = places.get(name)
            if i is not None:
                shares[i] = share
        return shares

    def _saturated(
        self,
        ctx: SchedulingContext,
        backends: Sequence[BackendState],
        scores: list[float],
        best: float,
        prompt: int,
        shares: FloatArray,
    ) -> list[float]:
        """Blend in the queued prompt tokens as every chance falls under
        ``saturated_below``: with no backend likely to meet the objective, the chances and
        the corrected predictions they come from are small differences in the model's
        tail, and a correction learned in a backlog feeds back into where the backlog
        grows. Towards the fewest (least-prompt-tokens, the one static policy that held its
        goodput at saturation, drains the backlog evenly); under ``overflow``, where the
        gateway sends every request (no overload guard), towards the most: the backend
        whose queue already makes its requests late takes the one no backend can serve in
        time, and the others keep serving theirs within the objective (loadtests/README.md,
        "Overflow"). Where the guard judges requests, such a request waits in the
        admission queue or is refused instead, and one sent anyway (a critical request at
        its deadline) should go where it is served soonest.

        The request's own work on a backend is the part of its prompt that backend must
        prefill (``shares``: what its engine likely has cached): counted whole, a
        conversation's next turn weighed as much prefill on its own engine as on a cold
        one (loadtests/README.md, "Sessions stay on their engine")."""
        works = [
            (b.prefill_pending if b.prefill_pending > 0 else 0)
            + max(1, round(prompt * (1.0 - share)))
            for b, share in zip(backends, shares.tolist(), strict=True)
        ]
        if best < self.overflow and not ctx.policy.overload.shed_above:
            return self.blend(scores, works, best / self.overflow, most=True)
        return self.blend(scores, works, best / self.saturated_below)

    @staticmethod
    def blend(
        scores: list[float], works: Sequence[int], depth: float, most: bool = False
    ) -> list[float]:
        """The scores moved towards the fewest queued prompt tokens (``works``: each
        backend's queued plus the request's own), or with ``most`` towards the most, by
        ``1 - depth`` (``depth``: the best chance over the threshold it fell under)."""
        keep, share = depth, 1.0 - depth
        if most:
            top = max(works)
            return [keep * x + share * k / top for x, k in zip(scores, works, strict=True)]
        least = min(works)
        return [keep * x + share * least / k for x, k in zip(scores, works, strict=True)]

    def rate(
        self,
        ttft: float,
        tpot: float,
        objective: Objective,
        tokens: float,
        fastest: float | None = None,
    ) -> tuple[float, float]:
        """(P(meet), speed) of one predicted (TTFT, TPOT); speed is
        ``budget / (budget + e2e)``, the wait past ``fastest`` (the candidates' lowest
        predicted TTFT) plus ``wait_slack`` counted ``1 + wait_weight`` times, and the
        TTFT past both ``fastest`` and ``tail_from`` ``tail_weight`` times more when
        ``fastest`` lies within ``TAIL_BAND`` of ``tail_from``.
        ``score_all`` runs the same arithmetic over every candidate, compiled
        (``latency_kernel``)."""
        ttft_goal, tpot_goal = objective.ttft_ms / 1000.0, objective.tpot_ms / 1000.0
        spread = self.spread
        later = tokens - 1.0 if tokens > 1.0 else 0.0
        meet = 1.0 / (1.0 + (ttft / ttft_goal) ** spread)
        if later:
            meet /= 1.0 + (tpot / tpot_goal) ** spread
        budget = ttft_goal + tpot_goal * later
        felt = ttft
        if fastest is not None:
            tolerated = fastest + self.wait_slack * ttft_goal
            if ttft > tolerated:
                felt += self.wait_weight * (ttft - tolerated)
            floor = self.tail_from * ttft_goal
            tail = max(fastest, floor)
            low, high = TAIL_BAND
            if low * floor <= fastest < high * floor and ttft > tail:
                felt += self.tail_weight * (ttft - tail)
        return meet, budget / (budget + felt + tpot * later)

    def explain(self, ctx: SchedulingContext, backend: BackendState) -> str:
        request = ctx.request
        objective = ctx.policy.slo.objective(request.model, request.label, request.tenant)
        tokens = ctx.latency.output_tokens(request.label, request.max_tokens)
        share = ctx.cached_shares().get(backend.name, 0.0) if self.prefix_cache else 0.0
        p = ctx.latency.predict(backend, request, share)
        meet, _ = self.rate(p.ttft_s, p.tpot_s, objective, tokens)
        spec = f", acceptance {p.acceptance:.2f}" if p.acceptance is not None else ""
        if p.cached_tokens:
            spec += f", ~{p.cached_tokens} prompt tok cached"
        # Compact: it is also the route header's reason. /admin/explain adds p.describe().
        return (
            f"predicted TTFT ~{p.ttft_s * 1000:.0f} ms, TPOT ~{p.tpot_s * 1000:.1f} ms "
            f"(batch {p.batch}, {p.queued_tokens} tok queued{spec}), ~{tokens:.0f} tokens: "
            f"P(TTFT <= {objective.ttft_ms:g} ms, TPOT <= {objective.tpot_ms:g} ms) {meet:.2f}"
        )
