"""The seam of the SQL sink (issue 42): the flow, the target checks and the bookkeeping rules
(``diffcdc/sinks/sql/``) import no database driver and nothing of a dialect's package, and the
PostgreSQL dialect provides every member of the :class:`Dialect` protocol, with its
parameters, so a second dialect is one more package that implements it."""

from __future__ import annotations

import ast
import inspect
import os
import typing

import diffcdc.sinks.sql as neutral
from diffcdc.sinks.postgres.dialect import PostgresDialect
from diffcdc.sinks.sql.dialect import Dialect

#: Database drivers (top-level modules) the neutral package must not import.
DRIVERS = frozenset({"psycopg", "psycopg2", "psycopg_pool", "asyncpg", "pyodbc", "pymssql",
                     "mariadb", "MySQLdb", "pymysql", "mysql", "sqlalchemy", "oracledb"})
#: The dialects' packages.
DIALECTS = ("diffcdc.sinks.postgres",)


def _imported(source: str, package: str) -> list[str]:
    """Every module ``source`` imports, anywhere in it (also inside functions and
    ``TYPE_CHECKING`` blocks), relative imports resolved against ``package``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] \
                if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found += [module, *(f"{module}.{alias.name}" for alias in node.names)]
    return found


def _forbidden(modules: list[str]) -> list[str]:
    return sorted({m for m in modules if m.split(".")[0] in DRIVERS
                   or any(m == d or m.startswith(d + ".") for d in DIALECTS)})


def _members(protocol: type) -> set[str]:
    own = {n for n in vars(protocol) if not n.startswith("_")}
    return own | set(getattr(protocol, "__annotations__", {}))


def _parameters(function: typing.Any) -> list[tuple[str, object, object, object]]:
    hints = typing.get_type_hints(function)
    return [(p.name, p.kind, p.default, hints.get(p.name))
            for p in inspect.signature(function).parameters.values()]


def test_the_neutral_sql_sink_imports_no_driver_and_postgres_provides_the_dialect():
    folder = os.path.dirname(neutral.__file__)
    modules = sorted(f for f in os.listdir(folder) if f.endswith(".py"))
    assert {"dialect.py", "sink.py", "target_check.py", "bookkeeping.py"} <= set(modules)
    # the walk finds what it must refuse, wherever it stands
    planted = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import psycopg.sql\n"
               "def f():\n    from ..postgres import types\n    import pyodbc\n")
    assert _forbidden(_imported(planted, "diffcdc.sinks.sql")) == [
        "diffcdc.sinks.postgres", "diffcdc.sinks.postgres.types", "psycopg.sql", "pyodbc"]
    for name in modules:
        with open(os.path.join(folder, name), encoding="utf-8") as handle:
            imported = _imported(handle.read(), "diffcdc.sinks.sql")
        assert _forbidden(imported) == [], name

    members = _members(Dialect)
    assert {"connect", "bulk_load", "apply_current", "history_apply", "bookkeeping_insert",
            "table_identity", "read_table", "names"} <= members
    missing = sorted(m for m in members if not hasattr(PostgresDialect, m)
                     and m not in PostgresDialect.__annotations__)
    assert missing == []
    for name in sorted(members):
        wanted = getattr(Dialect, name, None)
        if not callable(wanted):
            continue
        given = getattr(PostgresDialect, name)
        assert callable(given), name
        assert _parameters(given) == _parameters(wanted), name
    assert PostgresDialect.names.kind == "postgres"
    assert all(isinstance(c, str) for c in PostgresDialect.work_columns)
