"""Live telemetry: every GPU through NVML, every server's health and metrics."""
