"""The ``devshare`` command line: one module per subcommand, each with ``register(app)``."""
