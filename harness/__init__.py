"""How kernels are measured: suite discovery, correctness, device selection, the runner."""
