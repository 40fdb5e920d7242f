"""``python -m kernelwatch.cli``: the command line where no console script was installed
(a GPU host that took the wheel with ``pip install --target``)."""

from kernelwatch.cli.main import main

main()
