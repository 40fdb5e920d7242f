"""The GPU self-check's harness side: ``stages`` runs each stage in a child process under one
deadline and writes the report folder; ``measure`` is what the kernel child measures for each
(its ``selfcheck`` mode). The judging is pure (``analysis/trust.py``), the summary the
report's (``report/trust_summary.py``) and the command ``cli/selfcheck.py``'s.
"""
