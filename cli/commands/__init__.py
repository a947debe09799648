"""The ``taskenv`` subcommands, one module per resource."""
