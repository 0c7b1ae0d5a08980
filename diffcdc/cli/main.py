"""The ``diffcdc`` command: parse, call the engine, print, exit.

Exit status: 0 success (also when nothing changed); 2 usage or config error; 3 input refused;
1 anything else; 130 interrupted; 141 the output pipe was closed (``| head``). Errors are one
line on stderr; ``--debug`` adds the trace.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback
from collections.abc import Sequence

from diffcdc import errors
from diffcdc.cli.hints import Invocation
from diffcdc.cli.parser import BY_NAME, build_parser
from diffcdc.errors import DiffcdcError

log = logging.getLogger("diffcdc")


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args_list
    errors.hint_commands = None  # an earlier main() in this process (tests, notebooks)
    try:
        parser = build_parser()
        errors.hint_commands = Invocation(parser, args_list).complete
        args = parser.parse_args(args_list)
        _setup_logging(args.quiet, debug)
        code = int(_dispatch(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
        return code
    except DiffcdcError as exc:
        log.debug("the error's trace:", exc_info=True)  # to the run's log file, if any
        if debug:
            traceback.print_exc()
        print(f"diffcdc: error: {exc}", file=sys.stderr)
        if "--json" in args_list:
            print(json.dumps({"ok": False, **exc.to_dict()}))
        return exc.exit_code
    except KeyboardInterrupt:
        print("diffcdc: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (``diffcdc status | head -1``): quietly
        _silence_stdout()
        return 141
    except Exception as exc:  # noqa: BLE001 - the last line of defence prints one line
        log.debug("the error's trace:", exc_info=True)
        if debug:
            traceback.print_exc()
        from diffcdc.spark.connect import lost_server_error

        lost = lost_server_error(exc)  # a Spark Connect server lost under verify, repair ...
        if lost is not None:
            print(f"diffcdc: error: {lost}", file=sys.stderr)
            if "--json" in args_list:
                print(json.dumps({"ok": False, **lost.to_dict()}))
            return lost.exit_code
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"diffcdc: unexpected error: {type(exc).__name__}: {first} — run with --debug for "
              "the trace", file=sys.stderr)
        if "--json" in args_list:  # the same shape as a diffcdc error's, never nothing
            print(json.dumps({"ok": False, "error": type(exc).__name__, "exit_code": 1,
                              "message": first, "table": None, "snapshot": None, "path": None,
                              "hint": "run with --debug for the trace"}))
        return 1
    finally:
        errors.hint_commands = None  # this command line's options are not the next caller's


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file descriptor (tests, notebooks)
        pass


def _setup_logging(quiet: bool, debug: bool) -> None:
    """Progress lines on stderr, each stamped ISO-8601 with the zone (``--quiet``: warnings
    and errors only); the logger passes INFO on, for the run's log file."""
    from diffcdc.cli.progress import TERMINAL_HANDLER, IsoFormatter

    level = logging.DEBUG if debug else logging.WARNING if quiet else logging.INFO
    handler = logging.StreamHandler(sys.stderr)
    handler.set_name(TERMINAL_HANDLER)
    handler.setFormatter(IsoFormatter("%(asctime)s %(message)s"))
    handler.setLevel(level)
    for old in log.handlers:  # an earlier main() in this process (tests, notebooks)
        old.close()
    log.handlers[:] = [handler]  # a run adds its log file (diffcdc.runlog) at DEBUG
    log.setLevel(min(level, logging.INFO))
    log.propagate = False


def _dispatch(args: argparse.Namespace) -> int:
    from diffcdc.spark.version import require_pyspark

    require_pyspark()  # before any module that imports it: one line, not an ImportError
    return BY_NAME[args.command].run(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
