"""The latency model: predicted TTFT and TPOT of one request on each backend.

Built on the calibrated step costs of each backend's engine (``proxy.stepcost``, the model
the simulator runs on too: a step-time grid T(B, q) over batch size and query length,
draft-step costs, the prefill cost per prompt token and the chunked-prefill token budget;
measured on an H200, see ../shared/calibration) and corrected online by what each backend delivers.

For a request of P prompt tokens sent to a backend with B requests in flight, Q prompt
tokens sent and not yet answered (``BackendState.prefill_pending``), speculation method m
with k drafts, and draft acceptance rate a for the request's class:

- TTFT = ((Q + P) / budget + w) * T_m(B) + c * (Q + P): vLLM prefills first come,
  first served, in chunks of the step's token budget left by the decodes
  (``budget = max_num_batched_tokens - B (k + 1)``), each chunk riding on a decode step
  of the running batch (T_m: verification plus k draft steps) and adding c per prompt
  token. On a busy engine w = 3/2: half the step under way on arrival, then the whole
  step the prompt's last chunk rides on (a prompt under the budget still takes one whole
  step, not the fraction P / budget); on an idle one w = 1, nothing being under way.
- TPOT = T_m(B + 1) / (1 - u) / (1 + a k): one step of the batch it joins, stretched by
  the share of engine time u = c * R spent prefilling other prompts (R: the backend's
  recent prompt-token rate; chunked prefill puts those chunks into the same steps as its
  decodes), over the tokens a step yields (1 + a k, with a the measured accepted/drafted
  draft tokens; for chain drafting with per-token acceptance p that is
  (1 - p^(k+1)) / (1 - p)).

Each backend's predictions are then multiplied by an exponentially weighted (geometric)
mean of measured/predicted ratios of its past requests, which absorbs what the profile
does not know (another GPU, a longer context, CPU overhead). Prompt tokens are estimated
from the request size with a bytes-per-token ratio learned per class from the usage the
backends report, and the expected output length per class from past completions
(as a share of ``max_tokens`` when the request sets one).

What a request costs the others is predicted too: its prefill of c * P seconds rides on
the decode steps of the B requests already on the backend, delaying each of them by that
much (``imposed_s`` = B * c * P), which is how one long prompt breaks its neighbours' TPOT.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from proxy.policy import LatencySettings, Policy
from proxy.records import LatencyForecast, Outcome, RequestInfo
from proxy.routing.acceptance import AcceptanceTracker, assumed_rate
from proxy.routing.changes import Changes
from proxy.routing.fleet import BackendState, Fleet
from proxy.stepcost import (
    GPUS,
    EngineProfile,
    StepCostModel,
    default_profile,
    gpu_profile,
    load_profile,
)
from proxy.stepcost import SpecMethod as ProfileMethod

# The policy's speculation methods on the calibrated profile's drafters: suffix decoding
# drafts for free as prompt lookup does; EAGLE and MTP heads are one-layer heads like the
# measured EAGLE-like head.
_PROFILE_METHOD: dict[str, ProfileMethod] = {
    "none": "none",
    "ngram": "ngram",
    "suffix": "ngram",
    "draft_model": "draft_model",
    "eagle": "eagle3",
    "eagle3": "eagle3",
    "mtp": "eagle3",
}
# A prediction off by more than this factor is a fault (a stall, a retry), not a lesson.
_MAX_RATIO = 10.0
# Prefill never takes the whole engine in the TPOT formula (it would divide by zero).
_MAX_PREFILL_SHARE = 0.9
# Candidate lists whose places in the kept terms are remembered (a few per model and
# class: a list changes when a filter's verdict does).
_MAX_LISTS = 64

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
# A candidate list's rows in the kept arrays (None: all of them, in order) and each
# candidate's place in the list by name.
_Places = tuple[IntArray | None, Mapping[str, int]]


def load_engine_profile(name: str) -> EngineProfile:
    """``default`` (bundled, measured on an H200), a GPU name (``h100``, ``a100``, ``l40s``:
    estimates derived from it, proxy/stepcost/hardware.py) or a profile file laid over the
    default; ValueError if unusable."""
    if name == "default":
        return default_profile()
    if name.lower() in GPUS:
        return gpu_profile(name)
    try:
        return load_profile(name)
    except OSError as exc:
        raise ValueError(f"latency profile {name!r}: cannot read: {exc.strerror}") from exc
    except ValueError as exc:
        raise ValueError(f"latency profile {name!r}: {exc}") from exc


class EngineCosts:
    """One engine's calibrated step costs in seconds, memoised (read on the request path)."""

    def __init__(self, profile: EngineProfile) -> None:
        self.profile = profile
        self._model = StepCostModel(profile)
        self.prefill_s_per_token = profile.prefill_ms_per_token / 1000.0
        self.chunk_tokens = profile.max_num_batched_tokens
        self._steps: dict[tuple[str, int, int], float] = {}

    def step_s(self, method: str, batch: int, k: int) -> float:
        """One engine step of ``batch`` decoding sequences (verification and drafts)."""
        key = (method, batch, k)
        cached = self._steps.get(key)
        if cached is None:
            profile_method = _PROFILE_METHOD.get(method, "eagle3")
            cached = self._model.spec_step_ms(profile_method, max(batch, 1), k) / 1000.0
            self._steps[key] = cached
        return cached


@dataclass(slots=True)
class _Online:
    """What has been measured about one backend, and its step costs by batch size."""

    costs: EngineCosts
    window: int
    method: str = "none"
    k: int = 0
    ttft_ratio: float = 1.0
    tpot_ratio: float = 1.0
    # Prompt tokens sent here, exponentially decayed (``prefill_window_s``), and when.
    prefill_sum: float = 0.0
    prefill_at: float = 0.0
    ttft_errors: deque[float] = field(init=False)
    tpot_errors: deque[float] = field(init=False)

    steps: dict[int, float] = field(init=False)
    # The predictions with the request's own part left open, for the load they were
    # computed at (``inflight``, ``pending``): TTFT = ``ttft_base + ttft_per_token * P``
    # for a prompt of P tokens, TPOT = ``tpot_step`` over the tokens a step yields (the
    # class's acceptance, ``k`` drafts), and the delay its prefill imposes on the others
    # ``imposed_per_token * P``; corrections applied, the ``model_`` ones without. Kept
    # current (``LatencyModel._refresh``): recomputed when the backend's load moves, when
    # something measured changes them, and when the prompt-token rate has decayed a
    # while (``terms_at``); not per request.
    terms_at: float = -math.inf
    inflight: int = 0
    pending: int = 0
    k_now: int = 0
    ttft_base: float = 0.0
    ttft_per_token: float = 0.0
    tpot_step: float = 0.0
    imposed_per_token: float = 0.0
    model_ttft_base: float = 0.0
    model_ttft_per_token: float = 0.0
    model_tpot_step: float = 0.0
    step_now: float = 0.0
    prefill_share: float = 0.0

    def __post_init__(self) -> None:
        self.ttft_errors = deque(maxlen=self.window)
        self.tpot_errors = deque(maxlen=self.window)
        self.steps = {}

    def invalidate(self) -> None:
        self.terms_at = -math.inf

    def step_s(self, batch: int) -> float:
        """One step of ``batch`` decoding sequences with this backend's speculation."""
        cached = self.steps.get(batch)
        if cached is None:
            cached = self.steps[batch] = self.costs.step_s(self.method, batch, self.k)
        return cached


@dataclass(frozen=True, slots=True)
class Prediction:
    """One backend's predicted latencies for a request, with what they came from."""

    ttft_s: float
    tpot_s: float
    model_ttft_s: float
    model_tpot_s: float
    queued_tokens: int
    prompt_tokens: int
    # Of those, the ones its engine likely has cached (the prefix index's share): not
    # prefilled again.
    cached_tokens: int
    batch: int
    step_s: float
    tokens_per_step: float
    acceptance: float | None
    prefill_share: float
    ttft_ratio: float
    tpot_ratio: float
    # Decode delay its prefill adds to the requests already there, summed over them.
    imposed_s: float

    def describe(self) -> str:
        cached = f" ({self.cached_tokens} more cached)" if self.cached_tokens else ""
        spec = (
            f", acceptance {self.acceptance:.2f}: {self.tokens_per_step:.2f} tokens/step"
            if self.acceptance is not None
            else ""
        )
        return (
            f"TTFT ~{self.ttft_s * 1000:.0f} ms ({self.queued_tokens} tok queued + "
            f"{self.prompt_tokens - self.cached_tokens} own{cached}, "
            f"x{self.ttft_ratio:.2f} measured), "
            f"TPOT ~{self.tpot_s * 1000:.1f} ms (step {self.step_s * 1000:.1f} ms at "
            f"batch {self.batch}, prefill share {self.prefill_share:.0%}{spec}, "
            f"x{self.tpot_ratio:.2f} measured); its prefill delays the {self.batch - 1} "
            f"already there by {self.imposed_s * 1000:.0f} ms in all"
        )


@dataclass(frozen=True, slots=True)
class Terms:
    """Every candidate's predictions with the request's prompt left open, as arrays in
    the candidates' order: TTFT = ``ttft_base + ttft_per_token * P`` for a prompt of P
    tokens, TPOT = ``tpot`` (the request's class's acceptance in it), the delay its
    prefill imposes on the others ``imposed_per_token * P``; what ``predict`` gives
    backend by backend, to the bit. Read-only: the model's kept arrays."""

    ttft_base: FloatArray
    ttft_per_token: FloatArray
    tpot: FloatArray
    imposed_per_token: FloatArray
    # Each candidate's place in the arrays, by name.
    places: Mapping[str, int]


class _Table:
    """The fleet's terms kept as arrays, row by row current.

    A row is recomputed from the backend's ``_Online`` terms (``LatencyModel._refresh``,
    the one formula) when its backend was written: the fleet's change log (load, scraped
    acceptance), the acceptance tracker's (measured rates) and the model's own (a
    dispatch's prompt, a learned correction); every row when they age (``load``).
    Arrays because the scorer's compiled loop reads them whole (``scheduler/
    latency_kernel.py``; loadtests/README.md, routing decision time). A candidate list
    reads its rows through an index kept with it (``positions``).
    """

    def __init__(self, model: LatencyModel, fleet: Fleet, now: float) -> None:
        self.model = model
        # The fleet's backends as they were when built (a policy swaps in a new dict).
        self.members = fleet.backends
        self.backends = list(fleet.backends.values())
        backends = self.backends
        self.at = {b.name: i for i, b in enumerate(backends)}
        n = len(backends)
        self.ttft_base: FloatArray = np.zeros(n)
        self.ttft_per_token: FloatArray = np.zeros(n)
        self.imposed_per_token: FloatArray = np.zeros(n)
        # TPOT by class: the step over the tokens it yields at the class's acceptance;
        # rows recomputed since, brought into a class's array when a request of it reads.
        self.tpot: dict[str, FloatArray] = {}
        self.tpot_behind: dict[str, set[int]] = {}
        self.written = (
            fleet.changes.subscribe(self),
            model.acceptance.changes.subscribe(self),
            model.changes.subscribe(self),
        )
        # Where candidate lists' rows are: by the list (held: the key is its id), and by
        # its members' ids.
        self._lists: dict[int, tuple[Sequence[BackendState], _Places]] = {}
        self._positions: dict[tuple[int, ...], _Places] = {}
        self.fresh_until = -math.inf
        # When a request last read the table: an idle gateway stops refreshing it.
        self.read_at = now
        self.load(now, every=False)

    def load(self, now: float, *, every: bool) -> None:
        """Every row from its backend's terms, those recomputed at ``now`` first where out
        of date (``every``: all of them, but once per ``now`` across tables)."""
        for seen in self.written:
            seen.clear()
        model = self.model
        before = now if every else now - model.fresh_s
        states = [model._current(b, now, before) for b in self.backends]
        self.ttft_base[:] = [t.ttft_base for t in states]
        self.ttft_per_token[:] = [t.ttft_per_token for t in states]
        self.imposed_per_token[:] = [t.imposed_per_token for t in states]
        for label, tpot in self.tpot.items():
            tpot[:] = [model.tpot(t, b, label) for t, b in zip(states, self.backends, strict=True)]
            self.tpot_behind[label].clear()
        self.fresh_until = min((t.terms_at for t in states), default=now) + model.fresh_s

    def positions(self, backends: Sequence[BackendState]) -> _Places:
        """Where each candidate's row is (None: the whole fleet in order, read as it is;
        KeyError: a backend not in this table), and each candidate's place in the list by
        name. Kept by the list, and by its members for a list made anew per request (a
        filter that drops a backend returns a new list)."""
        kept = self._lists.get(id(backends))
        if kept is not None and kept[0] is backends:
            return kept[1]
        # Ids of the backends this table holds cannot be taken by other objects meanwhile.
        members = tuple(map(id, backends))
        found = self._positions.get(members)
        if found is None:
            rows, at = self.backends, self.at
            places = [at[b.name] for b in backends]
            if any(rows[i] is not b for i, b in zip(places, backends, strict=True)):
                raise KeyError("a candidate not in the fleet the terms were kept for")
            if places == list(range(len(rows))):
                found = (None, at)
            else:
                index = np.array(places, dtype=np.intp)
                found = (index, {b.name: i for i, b in enumerate(backends)})
            if len(self._positions) >= _MAX_LISTS:
                self._positions.clear()
            self._positions[members] = found
        if len(self._lists) >= _MAX_LISTS:
            self._lists.clear()
        self._lists[id(backends)] = (backends, found)
        return found

    def catch_up(self, now: float) -> None:
        """The rows of the backends written since the last request."""
        at = self.at
        for seen in self.written:
            if seen:
                for name in seen:
                    i = at.get(name)
                    if i is not None:
                        self._row(i, now)
                seen.clear()

    def tpot_of(self, label: str) -> FloatArray:
        """The class's TPOT row by row, its rows recomputed since it was last read first."""
        tpot = self.tpot.get(label)
        model = self.model
        if tpot is None:
            online = model._online
            tpot = self.tpot[label] = np.array(
                [
                    model.tpot(online.get(b.name) or model._adopt(b), b, label)
                    for b in self.backends
                ],
                dtype=np.float64,
            )
            self.tpot_behind[label] = set()
            return tpot
        behind = self.tpot_behind[label]
        if behind:
            online, backends = model._online, self.backends
            for i in behind:
                b = backends[i]
                tpot[i] = model.tpot(online[b.name], b, label)
            behind.clear()
        return tpot

    def _row(self, i: int, now: float) -> None:
        model = self.model
        t = model._current(self.backends[i], now, now - model.fresh_s)
        self.ttft_base[i] = t.ttft_base
        self.ttft_per_token[i] = t.ttft_per_token
        self.imposed_per_token[i] = t.imposed_per_token
        for behind in self.tpot_behind.values():
            behind.add(i)


class LatencyModel:
    """Per-backend TTFT/TPOT predictions, learned corrections and prediction errors."""

    def __init__(
        self,
        policy: Policy,
        acceptance: AcceptanceTracker,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.acceptance = acceptance
        self.clock = clock
        self._online: dict[str, _Online] = {}
        self._bytes_per_token: dict[str, float] = {}
        self._output_mean: dict[str, float] = {}
        self._output_share: dict[str, float] = {}
        # Backends whose terms moved by what is learned here (a dispatch's prompt, an
        # outcome's correction): read by the kept tables as the fleet's writes are.
        self.changes = Changes()
        self.apply_policy(policy)

    # -- configuration --------------------------------------------------------------------
    def apply_policy(self, policy: Policy) -> None:
        """Load the policy's profiles (raises on a bad one) and keep what was measured
        about backends that stay on the same profile."""
        settings = policy.latency
        profiles: dict[str, EngineCosts] = {}
        online: dict[str, _Online] = {}
        for spec in policy.backends:
            name = settings.profile_for(spec.pool)
            costs = profiles.get(name)
            if costs is None:
                costs = profiles[name] = EngineCosts(load_engine_profile(name))
            method, k = spec.speculation.method, spec.speculation.k
            old = self._online.get(spec.name)
            if old is not None and old.costs.profile == costs.profile:
                old.costs, old.method, old.k, old.steps = costs, method, k, {}
                old.invalidate()
                online[spec.name] = old
            else:
                online[spec.name] = _Online(costs, settings.window, method, k)
        self.settings: LatencySettings = settings
        self.priors = policy.acceptance.priors
        self._online = online
        # The fleet's terms kept as arrays (``terms``), built by the first request.
        self._table: _Table | None = None
        self._decay = 1.0 / settings.prefill_window_s
        # Cached terms older than this are recomputed: the prompt-token rate decays by
        # under 2% meanwhile.
        self._fresh_s = settings.prefill_window_s / 64

    # -- estimates of the request -------------------------------------------------------------
    def prompt_tokens(self, label: str, prompt_bytes: int) -> int:
        ratio = self._bytes_per_token.get(label, self.settings.bytes_per_token)
        return max(int(prompt_bytes / ratio), 1)

    def output_tokens(self, label: str, max_tokens: int | None) -> float:
        """Expected output tokens: the class's usual share of ``max_tokens``, else its
        usual length (capped by ``max_tokens``)."""
        if max_tokens is not None:
            share = self._output_share.get(label)
            if share is not None:
                return max(share * max_tokens, 1.0)
        mean = self._output_mean.get(label, self.settings.output_tokens)
        return min(mean, float(max_tokens)) if max_tokens is not None else mean

    def typical_output_tokens(self) -> float:
        """Expected output tokens of a request of any class (the neighbours' length)."""
        means = self._output_mean
        return sum(means.values()) / len(means) if means else self.settings.output_tokens

    def draft_acceptance(self, backend: BackendState, label: str) -> float | None:
        """Measured accepted/drafted rate for this class, else the method's prior."""
        if not backend.speculative:
            return None
        measured = self.acceptance.usable.get(label, {}).get(backend.name)
        if measured is not None:
            return measured
        prior = self.priors.get(backend.method, {}).get(label)
        return assumed_rate(prior, backend.window_acceptance)[0]

    # -- predictions ---------------------------------------------------------------------
    @property
    def fresh_s(self) -> float:
        """How long a backend's terms stay current without a change of its load."""
        return self._fresh_s

    def refresh(self) -> None:
        """The kept terms (``terms``) recomputed for the backends' current load and time,
        off the request path (after a write to many backends, and as the terms age), so
        that a request finds at most the few rows its neighbours wrote to recompute. Not
        once no request has read them for a prefill window (an idle gateway spends nothing;
        the first request after the pause recomputes what it reads)."""
        table = self._table
        now = self.clock()
        if table is not None and now - table.read_at <= self.settings.prefill_window_s:
            table.load(now, every=True)

    def catch_up(self) -> None:
        """The kept terms' rows of the backends written since the last request, and each
        class's TPOT rows, recomputed now: off the request path once a request is on its
        way (``Scheduler.catch_up``). Terms past their freshness are left to the
        background refresh (or the next request)."""
        table = self._table
        if table is None:
            return
        now = self.clock()
        if now > table.fresh_until:
            return
        table.catch_up(now)
        for label in table.tpot:
            table.tpot_of(label)

    def terms(self, fleet: Fleet, backends: Sequence[BackendState], label: str) -> Terms:
        """The candidates' terms for a request of class ``label``, as arrays aligned with
        ``backends`` (of ``fleet``): the scheduler's batch form of ``predict`` (hot path:
        kept between requests, rows recomputed where a backend was written)."""
        now = self.clock()
        table = self._table
        if table is None or table.members is not fleet.backends:
            table = self._table = _Table(self, fleet, now)
        elif now > table.fresh_until:
            table.load(now, every=False)
        else:
            table.catch_up(now)
        table.read_at = now
        try:
            index, places = table.positions(backends)
        except KeyError:  # a backend the fleet has swapped (a policy being applied)
            table = self._table = _Table(self, fleet, now)
            index, places = table.positions(backends)
        tpot = table.tpot_of(label)
        if index is None:
            return Terms(
                table.ttft_base, table.ttft_per_token, tpot, table.imposed_per_token, places
            )
        return Terms(
            table.ttft_base.take(index),
            table.ttft_per_token.take(index),
            tpot.take(index),
            table.imposed_per_token.take(index),
            places,
        )

    def predict(
        self, backend: BackendState, request: RequestInfo, cached_share: float = 0.0
    ) -> Prediction:
        """One backend's prediction with what it came from (explanations, dispatch): from
        the same terms as ``terms``. ``cached_share``: the share of the prompt its engine
        likely has cached (``PrefixIndex.cached_shares``), not prefilled again."""
        label = request.label
        now = self.clock()
        t = self._current(backend, now, now - self._fresh_s)
        prompt = self.prompt_tokens(label, request.prompt_bytes)
        prefill = uncached(prompt, cached_share)
        acceptance = self.draft_acceptance(backend, label) if t.k_now else None
        per_step = _per_step(acceptance, t.k_now)
        return Prediction(
            imposed_s=t.imposed_per_token * prefill,
            ttft_s=t.ttft_base + t.ttft_per_token * prefill,
            tpot_s=t.tpot_step / per_step,
            model_ttft_s=t.model_ttft_base + t.model_ttft_per_token * prefill,
            model_tpot_s=t.model_tpot_step / per_step,
            queued_tokens=max(backend.prefill_pending, 0),
            prompt_tokens=prompt,
            cached_tokens=prompt - math.ceil(prefill),
            batch=backend.inflight + 1,
            step_s=t.step_now,
            tokens_per_step=per_step,
            acceptance=acceptance,
            prefill_share=t.prefill_share,
            ttft_ratio=t.ttft_ratio,
            tpot_ratio=t.tpot_ratio,
        )

    def unloaded(self, backend: BackendState, prediction: Prediction) -> tuple[float, float]:
        """(TTFT, TPOT) of the request ``prediction`` was made for, on its backend were it
        idle (nothing decoding or queued, no prefill beside it), corrected as the
        prediction is: the least its engine can give it, whatever the load."""
        now = self.clock()
        t = self._current(backend, now, now - self._fresh_s)
        base, per_token = _ttft_terms(t, 0, 0, t.k_now)
        prefill = prediction.prompt_tokens - prediction.cached_tokens
        ttft = (base + per_token * prefill) * prediction.ttft_ratio
        return ttft, t.step_s(1) * prediction.tpot_ratio / prediction.tokens_per_step

    def tpot(self, state: _Online, backend: BackendState, label: str) -> float:
        """Predicted TPOT for class ``label`` from the backend's current terms."""
        acceptance = self.draft_acceptance(backend, label) if state.k_now else None
        return state.tpot_step / _per_step(acceptance, state.k_now)

    def _current(self, backend: BackendState, now: float, before: float) -> _Online:
        """The backend's terms, recomputed at ``now`` if they were computed before
        ``before`` or for another load than its current one."""
        t = self._online.get(backend.name) or self._adopt(backend)
        if (
            t.terms_at < before
            or t.inflight != backend.inflight
            or t.pending != backend.prefill_pending
        ):
            self._refresh(t, backend, now)
        return t

    def _refresh(self, state: _Online, backend: BackendState, now: float) -> None:
        """The calibrated model of the module docstring for the backend's current load,
        with the request's prompt and acceptance left open, into ``state``'s terms."""
        k = state.k if backend.speculative else 0
        batch = backend.inflight
        pending = backend.prefill_pending
        queued = pending if pending > 0 else 0
        per_token = state.costs.prefill_s_per_token
        ttft_base, ttft_per_token = _ttft_terms(state, batch, queued, k)
        # Decayed prompt tokens over the time constant: the recent prompt-token rate.
        share = 0.0
        if state.prefill_sum:
            decay = self._decay
            rate = state.prefill_sum * math.exp((state.prefill_at - now) * decay) * decay
            share = min(per_token * rate, _MAX_PREFILL_SHARE)
        step = state.step_s(batch + 1)
        tpot_step = step / (1.0 - share)
        ttft_ratio = state.ttft_ratio
        state.terms_at, state.inflight, state.pending, state.k_now = now, batch, pending, k
        state.ttft_base = ttft_base * ttft_ratio
        state.ttft_per_token = ttft_per_token * ttft_ratio
        state.tpot_step = tpot_step * state.tpot_ratio
        state.imposed_per_token = batch * per_token
        state.model_ttft_base, state.model_ttft_per_token = ttft_base, ttft_per_token
        state.model_tpot_step, state.step_now, state.prefill_share = tpot_step, step, share

    def _adopt(self, backend: BackendState) -> _Online:
        """A backend of a policy being applied, not known here yet: the default profile."""
        speculation = backend.spec.speculation
        state = _Online(
            EngineCosts(default_profile()), self.settings.window, speculation.method, speculation.k
        )
        self._online[backend.name] = state
        return state

    def dispatch(
        self, backend: BackendState, request: RequestInfo, p: Prediction
    ) -> LatencyForecast:
        """The forecast of a request being sent to ``backend``, from ``p``, its
        ``predict`` there before it counts there; records the prompt tokens it will
        prefill there in the backend's prompt-token rate."""
        online = self._online[backend.name]
        now = self.clock()
        prefill = p.prompt_tokens - p.cached_tokens
        online.prefill_sum = prefill + online.prefill_sum * math.exp(
            (online.prefill_at - now) * self._decay
        )
        online.prefill_at = now
        online.invalidate()
        self.changes.mark(backend.name)
        return LatencyForecast(
            ttft_s=p.ttft_s,
            tpot_s=p.tpot_s,
            model_ttft_s=p.model_ttft_s,
            model_tpot_s=p.model_tpot_s,
            prompt_tokens=p.prompt_tokens,
            cached_tokens=p.cached_tokens,
            prompt_bytes=request.prompt_bytes,
            max_tokens=request.max_tokens,
            output_tokens=self.output_tokens(request.label, request.max_tokens),
        )

    # -- learning from outcomes -------------------------------------------------------------
    def observe(self, outcome: Outcome) -> None:
        """Correct the backend's ratios and the request estimates from one response."""
        forecast = outcome.forecast
        online = self._online.get(outcome.backend)
        if forecast is None or online is None:
            return
        alpha = self.settings.correction_alpha
        if outcome.timed_out:
            self._learn_timeout(online, outcome, forecast, alpha)
            return
        if not outcome.ok:
            return
        self._learn_request(outcome, forecast, alpha)
        if not outcome.events:
            # Not streamed: the "first byte" is the whole completion, no TTFT to learn from.
            return
        ttft, tpot = outcome.ttft, outcome.tpot
        if ttft is not None and ttft > 0 and forecast.model_ttft_s > 0:
            online.ttft_ratio = _geometric_step(
                online.ttft_ratio, ttft / forecast.model_ttft_s, alpha
            )
            online.ttft_errors.append(abs(ttft - forecast.ttft_s))
        if tpot is not None and tpot > 0 and forecast.model_tpot_s > 0:
            online.tpot_ratio = _geometric_step(
                online.tpot_ratio, tpot / forecast.model_tpot_s, alpha
            )
            online.tpot_errors.append(abs(tpot - forecast.tpot_s))
        online.invalidate()
        self.changes.mark(outcome.backend)

    def _learn_timeout(
        self, online: _Online, outcome: Outcome, forecast: LatencyForecast, alpha: float
    ) -> None:
        """A first-byte timeout: the TTFT was at least the wait. Learned as that lower
        bound, and only where it says the model was optimistic (the ratio it implies is
        above the one in force): an engine slower than its step costs (a prefill queue
        longer than modelled, a starved host) then stops being picked on a promise it
        cannot keep, though its slow requests never answer to teach it otherwise."""
        waited = outcome.finished - outcome.started
        if waited <= 0 or forecast.model_ttft_s <= 0:
            return
        ratio = waited / forecast.model_ttft_s
        if ratio <= online.ttft_ratio:
            return
        online.ttft_ratio = _geometric_step(online.ttft_ratio, ratio, alpha)
        online.invalidate()
        self.changes.mark(outcome.backend)

    def _learn_request(self, outcome: Outcome, forecast: LatencyForecast, alpha: float) -> None:
        label = outcome.label
        if outcome.prompt_tokens and forecast.prompt_bytes:
            ratio = forecast.prompt_bytes / outcome.prompt_tokens
            old = self._bytes_per_token.get(label, self.settings.bytes_per_token)
            self._bytes_per_token[label] = old + alpha * (ratio - old)
        produced = outcome.completion_tokens
        if produced:
            old = self._output_mean.get(label, self.settings.output_tokens)
            self._output_mean[label] = old + alpha * (produced - old)
            if forecast.max_tokens:
                share = min(produced / forecast.max_tokens, 1.0)
                old = self._output_share.get(label, share)
                self._output_share[label] = old + alpha * (share - old)

    # -- what it has learned, for metrics and the admin API ------------------------------------
    def errors(self) -> dict[str, tuple[float | None, float | None]]:
        """Per backend: median absolute error (seconds) of predicted TTFT and TPOT."""
        return {
            name: (_median(o.ttft_errors), _median(o.tpot_errors))
            for name, o in self._online.items()
        }

    def corrections(self) -> dict[str, tuple[float, float]]:
        """Per backend: the measured/predicted ratios applied to TTFT and TPOT."""
        return {name: (o.ttft_ratio, o.tpot_ratio) for name, o in self._online.items()}

    def bytes_per_token(self, label: str) -> float:
        return self._bytes_per_token.get(label, self.settings.bytes_per_token)


def _ttft_terms(state: _Online, batch: int, queued: int, k: int) -> tuple[float, float]:
    """TTFT = base + per_token * P on an engine with ``batch`` decoding and ``queued``
    prompt tokens ahead (the module docstring's formula, uncorrected)."""
    costs = state.costs
    chunk = costs.chunk_tokens
    budget = max(chunk - batch * (k + 1), chunk >> 3)
    per_token = costs.prefill_s_per_token
    now_step = state.step_s(batch)
    # Prefill of (queued + P) tokens in chunks of ``budget``, each riding on a step,
    # after the step under way (module docstring: w).
    wait = 1.5 if batch > 0 else 1.0
    return (queued / budget + wait) * now_step + per_token * queued, now_step / budget + per_token


def uncached(prompt: float, cached_share: float) -> float:
    """The prompt tokens an engine prefills when it has ``cached_share`` of the prompt
    cached: at least one (vLLM computes the last prompt token again, to sample from it).
    The latency scorer's compiled loop runs this same function."""
    return max(prompt * (1.0 - cached_share), 1.0)


def _per_step(acceptance: float | None, k: int) -> float:
    """Tokens one step yields: 1 + a k with drafts kept at rate a, else 1."""
    return 1.0 + acceptance * k if acceptance is not None else 1.0


def _geometric_step(current: float, observed: float, alpha: float) -> float:
    """One step of an exponentially weighted geometric mean (ratios are multiplicative)."""
    observed = min(max(observed, 1.0 / _MAX_RATIO), _MAX_RATIO)
    return float(current * (observed / current) ** alpha)


def _median(values: deque[float]) -> float | None:
    return statistics.median(values) if values else None
