"""How kernels are measured, one stage per place.

- The suite interface and discovery (``spec``, ``suite``), the records every stage writes
  (``records``), and the child process that imports a commit's kernels (``runner``,
  ``supervise``, ``child``, ``worktree``, ``device``).
- The check stage: ``correctness``, each case against its float64 reference.
- The timing stage, ``timing/``: timers, adaptive sampling, NVML telemetry, speed-of-light,
  the interleaved baseline and A/B, pinned configs, the GPU self-check's measurements.
- The GPU self-check's stages in child processes under one deadline, and its report folder
  (``selfcheck_stages``).
- The build stage, ``build/``: launches recorded without a GPU, cross-compiled for each
  architecture, with the static metrics read from the SASS and a build cache.
"""
