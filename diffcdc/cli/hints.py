"""The commands a message suggests, completed with the options of the command that printed it.

The engine and the sinks name the way out as a command (``diffcdc reload --table T --sink NAME
--yes``) without knowing how diffcdc was called: without the run's ``--config FILE`` (or its
``--source``, ``--keys``, ``--landing``, ``--state`` ...) such a command would not find the
table. The command line knows; each suggested command gets the options of the invocation that
the suggested command accepts and does not name itself, so it runs as printed.
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Sequence

#: Options of an invocation that are about that one call, never carried into a suggestion
#: (the suggestion names its own table, sinks and confirmation).
_OWN = frozenset({"--json", "--debug", "--quiet", "--yes", "--only", "--override-check",
                  "--to-version", "--sink", "--table", "--snapshot", "--ignore", "--help", "-h",
                  "--parallelism"})
#: Commands that act on one table: a suggestion without ``--table`` gets the error's table.
_ONE_TABLE = frozenset({"reload", "rollback", "drop", "repair"})
#: A suggested command inside a message: ``diffcdc <command> --option value ...`` up to a
#: quote that closes it, a bracket or the end of the clause; a value may be shell-quoted
#: (``--state 'my state'``: a quote after a space opens a value).
_WORD = r"(?:'[^']*'|[^-\s'\"()`;,][^\s'\"()`;,]*)"
_COMMAND = re.compile(r"diffcdc (run|plan|status|verify|reload|rollback|drop|repair)"
                      rf"((?: +--?[^\s'\"()`;,]+(?: +{_WORD})*)+)")


class Invocation:
    """How diffcdc was called: each option given, with its values, in order."""

    def __init__(self, parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
        self.commands = _subparsers(parser)
        command = next((a for a in argv if a in self.commands), None)
        self.options: list[tuple[str, list[str]]] = []
        if command is None:
            return
        takes = {o: a.nargs for a in self.commands[command]._actions for o in a.option_strings}
        rest = list(argv[argv.index(command) + 1:])
        while rest:
            token = rest.pop(0)
            name, eq, value = token.partition("=")
            if name not in takes and name.startswith("--"):  # argparse takes a unique prefix
                whole = [o for o in takes if o.startswith(name)]
                name = whole[0] if len(whole) == 1 else name
            if name not in takes:
                continue
            if eq:
                self.options.append((name, [value]))
            elif takes[name] == 0:
                self.options.append((name, []))
            elif takes[name] == "?":
                given = [rest.pop(0)] if rest and not rest[0].startswith("--") else []
                self.options.append((name, given))
            else:
                self.options.append((name, [rest.pop(0)] if rest else []))

    def complete(self, text: str, table: str | None = None) -> str:
        """``text`` with every suggested command completed (see the module docstring)."""
        config = next((v[0] for o, v in self.options if o == "--config" and v), None)
        if config is not None:  # a hint that could only say "the config file" names it
            text = text.replace("--config <the config file>", f"--config {shlex.quote(config)}")
        return _COMMAND.sub(lambda m: self._complete(m, table), text)

    def _complete(self, match: re.Match[str], table: str | None) -> str:
        command, given = match.group(1), match.group(2)
        parser = self.commands.get(command)
        if parser is None:
            return match.group(0)
        try:
            tokens = shlex.split(given)
        except ValueError:  # an unbalanced quote: left as it is
            return match.group(0)
        named = {t.partition("=")[0] for t in tokens if t.startswith("-")}
        if named & {"--help", "-h"}:
            return match.group(0)
        accepted = {o: a.nargs for a in parser._actions for o in a.option_strings}
        extra: list[str] = []
        if command in _ONE_TABLE and "--table" not in named and table:
            extra += ["--table", table]
        for option, values in self.options:
            if option in _OWN or option in named or option not in accepted:
                continue
            if not values and accepted[option] != 0:  # a bare ``verify --state``: its default
                continue
            if option == "--config" and named & {"--source", "--keys", "--landing"}:
                continue  # the suggestion names the table's options itself
            if option in ("--source", "--keys", "--landing") and "--config" in named:
                continue
            extra += [option, *values]
        if not extra:
            return match.group(0)
        words = " ".join(shlex.quote(w) for w in extra)
        head, tail = given.rstrip(), given[len(given.rstrip()):]
        if head.endswith(" --yes"):  # the confirmation stays last, as the commands print it
            return f"diffcdc {command}{head[:-6]} {words} --yes{tail}"
        return f"diffcdc {command}{head} {words}{tail}"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}
