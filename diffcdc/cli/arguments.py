"""The parser class and the argument types and option groups several commands share."""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from diffcdc.errors import UsageError


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """A bad option: one line and where to read more (exit 2), not the whole usage."""
        raise UsageError(message, hint=f"see '{self.prog} --help'")

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:  # type: ignore[override]
        """Unknown options are reported with the help of the command they were given to."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = getattr(parsed, "command", None)
            prog = f"{self.prog} {command}" if command else self.prog
            raise UsageError(f"unrecognized arguments: {' '.join(extras)}",
                             hint=f"see '{prog} --help'")
        return parsed


def folder_name(what: str) -> Any:
    """An argument type for a name diffcdc makes a folder of (``--table``, ``--schema``,
    ``--sink``): the config's name check, so a command line never reaches outside the state
    root or a landing root (``--table ../../etc``)."""
    from diffcdc.core.names import check_folder_name

    def check(value: str) -> str:
        try:
            return check_folder_name(value, what)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    check.__name__ = what.replace(" ", "_")  # argparse names the type in some messages
    return check


def csv_list(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


#: Landing options that are secrets: never taken from the command line (process lists and shell
#: histories show it); they come from the environment or a config file.
SECRET_LANDING_OPTIONS = ("account_key", "sas_token", "credential")


def _landing_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` → (key, value); true/false and numbers are typed. Never echoes a value."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise argparse.ArgumentTypeError("expected KEY=VALUE (e.g. max_workers=8)")
    if key in SECRET_LANDING_OPTIONS:
        raise argparse.ArgumentTypeError(
            f"{key} is a secret and is not taken from the command line; set it in the "
            f"environment or in the config file's landing_options (see docs/remote-landing.md)"
        )
    raw = raw.strip()
    if raw.lower() in ("true", "false"):
        return key, raw.lower() == "true"
    for cast in (int, float):
        try:
            return key, cast(raw)
        except ValueError:
            pass
    return key, raw


def add_landing_option_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--landing-option",
        dest="landing_options",
        type=_landing_option,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="option of a remote landing root (max_workers=8, retry_total=3, "
        "connection_verify=ca.pem, account_key_env=VAR, ...); repeatable; secrets only from "
        "the environment or a config file",
    )
