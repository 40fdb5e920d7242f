"""How kernels are measured, one stage per place.

- The suite interface, which a kernel repository's suite imports (``spec``, ``cuda_kernel``)
  and which every stage uses to find and launch it (``suite``, ``kernel_imports``,
  ``launcher``, ``device``, ``interpreter``, ``scaffold``); the records every stage writes
  (``records``).
- Process isolation, ``isolation/``: the kernel child that imports a commit's kernels, its
  sandbox, its supervision, the A/B sides, the runner split and the git checkouts.
- The check stage: ``correctness``, each case against its float64 reference.
- The timing stage, ``timing/``: timers, adaptive sampling, NVML telemetry, speed-of-light,
  the interleaved baseline and A/B, pinned configs.
- The GPU self-check, ``selfcheck/``: its stages in child processes under one deadline, its
  report folder, and what the kernel child measures for it.
- The build stage, ``build/``: launches recorded without a GPU, cross-compiled for each
  architecture, with the static metrics read from the SASS and a build cache.
"""
