"""Distributed cases: the ranks of a case started with ``torch.distributed`` inside the
kernel child, their correctness and lockstep timing, the world they ran on, and the
nccl-tests bandwidth arithmetic (docs/DISTRIBUTED.md)."""
