"""Serving numbers beside the kernels: the result files a serving benchmark job writes
(vLLM's and SGLang's), read into typed records tied to a deployment, and judged per
deployment like kernel history (docs/SERVING.md)."""
