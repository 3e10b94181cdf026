"""The simulated host: fake NVML and a fake vLLM server over real loopback HTTP. Never imports Textual."""
