"""The timing stage: timers, adaptive sampling, NVML telemetry, speed-of-light, one case timed
with its baseline interleaved, A/B between two commits, pinned configs and the GPU
self-check."""
