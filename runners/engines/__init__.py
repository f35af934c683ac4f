"""Engines a run is served by: the simulated engine and real OpenAI-compatible servers.

Shared by both: ``kinds`` (the engine kinds a config can name), ``latency_model`` (step and
serving-overhead times, seconds), ``kv_cache`` (KV capacity from model and GPU, tokens),
``profile`` (a measured engine's coefficients: presets and profile files) and ``fidelity`` (how
close the simulator comes to the real engine).

Simulated: ``sim_config`` (the ``sim`` engine's config, resolved against its profile) and
``simulator`` (the discrete-event model of a vLLM-like continuous-batching engine).

Real: ``adapters/`` (one module per engine: its launch config, command, metric names,
capabilities), ``real_config`` (options shared by the real-engine configs, and attaching to
running servers), ``real_engine`` (starting or attaching to the servers of a run), ``launcher``
(server processes), ``openai_client`` and ``sse`` (the streaming client and its event parser),
``telemetry`` (``/metrics`` scrapes), ``gpu`` (GPU memory through NVML), ``engine_decisions``
(the in-engine schedulers' decision files; the classes themselves live beside their policies in
``runners.schedulers.vllm``), ``server_tokens`` (a server's own tokenizer over HTTP) and
``discovery`` (which engines this machine can drive, for the home page).
"""
