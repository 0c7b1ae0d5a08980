"""The ``diffcdc`` command line (thin: parse, call the engine, print, exit)."""

from diffcdc.cli.main import main

__all__ = ["main"]
