"""The package version, in one place (the root re-exports it)."""

__version__ = "0.1.0"
