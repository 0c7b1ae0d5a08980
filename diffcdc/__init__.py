"""diffcdc: periodic full snapshots in, a minimal ordered change stream out."""

__version__ = "0.1.0"

__all__ = ["__version__", "run_dataframe"]


def __getattr__(name: str):  # lazy: importing diffcdc must not import pyspark
    if name == "run_dataframe":
        from diffcdc.api import run_dataframe

        return run_dataframe
    raise AttributeError(f"module 'diffcdc' has no attribute {name!r}")
