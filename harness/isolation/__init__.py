"""Process isolation: where kernel code runs and how the trusted side survives it.

``kernel_child`` is the child process that imports a commit's kernels; ``child`` starts one
(forked by a ``preload`` server that imported its libraries already, or by ``exec``) and
reads its signed lines (``channel``); ``supervise`` runs a suite's cases through it,
``ab_sides`` the two sides of an A/B in processes of their own. ``sandbox`` and ``jail``
decide what a child can see and who it is; ``remote`` and ``exchange`` are the runner split
(the deployed runner service and the trusted side's half). ``worktree`` and ``gitcmd`` check
out a commit without letting the repository run a program.
"""
