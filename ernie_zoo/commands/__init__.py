"""Subcommands of the `ernie-zoo` CLI (see `ernie_zoo.cli`)."""
