"""The benchmark engine: our own streaming load generator with ``vllm bench serve``'s definitions, live figures,
stored results, the real ``vllm bench serve`` as an alternative runner, and campaigns that compare topologies.

- ``metrics``: per-request records and the summary (vllm's key names and definitions);
- ``dataset`` / ``arrivals``: what is sent and when;
- ``httpstream`` / ``loadgen`` / ``worker``: the client, which runs in its own process;
- ``runner`` / ``live``: the parent side (live ``BenchTick`` events, results written as records arrive);
- ``store`` / ``table``: run directories, import of vllm result JSONs, the comparison table;
- ``serverside``: what the servers say about a run (KV transfer, Triton JIT), fingerprint, energy;
- ``vllmbench``: the real ``vllm bench serve`` as a runner;
- ``campaign`` / ``recommend``: bake-offs across topologies, rate sweeps, recommendations.
"""
