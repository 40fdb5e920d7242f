"""kernelwatch.analysis: statistics and detection rules as pure functions over records (no I/O)."""
