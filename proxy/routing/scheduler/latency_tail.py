"""Where the latency scorer's tail term weighs, shared by the scorer (``latency_scorer``)
and its compiled loop (``latency_kernel``): below both, so neither imports the other."""

# The fastest candidate's TTFT, in multiples of ``tail_from``, for which the tail weighs
# (loadtests/README.md, issue 15: weighed for shorter prompts and under load as well, it
# cost 1-3% of goodput at c256).
TAIL_BAND = (0.8, 2.0)
