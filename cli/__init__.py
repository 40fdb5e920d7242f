"""The ``kernelwatch`` command line: one module per command (``check.py`` defines
``kernelwatch check``), the options they share in ``arguments.py``."""
