"""The one configuration file, ``kernelwatch.toml``, and the environment variables that
override it."""
