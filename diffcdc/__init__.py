"""diffcdc: periodic full snapshots in, a minimal ordered change stream out."""

__version__ = "0.1.0"
