"""A simulated vLLM server: the OpenAI API, ``/metrics`` and an engine model behind them.

``server.SimServer`` runs one in the current event loop (several can share it),
``server.run_sim_in_thread`` runs one for synchronous callers, and ``specroute sim``
(``cli.main``) serves one from the command line. ``engine.Engine`` batches requests in
discrete steps whose cost comes from ``proxy.stepcost.EngineProfile`` (measured H200 step times
for a Llama-3.1-8B-class model by default). With the default profile, EAGLE-3 at k=3
lowers TPOT by about a third on chat prompts at low load and breaks even near batch 128;
code and RAG prompts, which accept more drafts, stay ahead up to 256.

Draft acceptance follows each request's content (``prompt_class``, ``overlap``): drafters
that are models by the class the text shows (code, retrieved documents, else chat; never
its length), prompt lookup also by how much of the prompt repeats itself. A benchmark
that knows the class it means sends it in the body field ``sim_prompt_class``.
"""
