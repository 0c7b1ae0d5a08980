"""Errors built whole where they are raised (issue 40): nothing in diffcdc amends an error
after it was raised.

* no module assigns to a caught exception (or one handed over as an argument) or re-words a
  caught error into a new one, but the one summary of a run's failed sinks
  (:func:`diffcdc.engine.publish.failed_sinks_error`) — an AST check over ``diffcdc/``;
* an error built while the engine works on a table names it, and a snapshot's step names the
  snapshot (:func:`diffcdc.errors.error_context`), unless the raise site names its own;
* the landing zone names the recovery that leaves the table's other sinks alone where it
  refuses (no wrapper amends the hint);
* a plan's refusal names its table, in one line, with its exit code; a run's failed sinks are
  summed up in a new error while the sink's own stays as it was raised.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import diffcdc
from diffcdc.config import TableConfig
from diffcdc.engine.context import RunOptions
from diffcdc.engine.idle import idle_report
from diffcdc.engine.plan import plan_table
from diffcdc.engine.run import run_table
from diffcdc.errors import (
    DiffcdcError,
    LandingZoneMismatch,
    PublishConflict,
    SourceError,
    StorageError,
    TargetMismatch,
    error_context,
)
from diffcdc.sinks.openmirroring.contract import check_continuation
from diffcdc.sinks.openmirroring.landing import PublishItem, file_sha256, open_landing, publish_one
from diffcdc.sources.base import PendingSnapshot, Source
from diffcdc.state.store import TableState
from tests.support.workspace import PERMISSIVE

PACKAGE = Path(diffcdc.__file__).parent
#: A class of ours that is an error, by its name (DiffcdcError's family, the sinks' own).
ERROR_CLASS = re.compile(r"^[A-Z]\w*(Error|Refused|Conflict|Mismatch|Unavailable|Lost|Violation|"
                         r"Failed)$")
#: An annotation that says a parameter holds an exception.
EXCEPTION_TYPE = re.compile(r"(Error|Exception|Refused|Conflict|Mismatch|Unavailable|Lost|"
                            r"Violation|Failed)\b")
#: An error's parts its text is made of: assigned to nothing but the error itself (``self``).
ERROR_TEXT = ("message", "hint", "snapshot")
#: The failed run's report rides on its error for the caller (run_many, tests): not its text.
ALLOWED = {("engine/run.py", "report")}
#: The one error built from others: the run's summary of its failed sinks.
SUMMARY = "engine/publish.py"


def _exception_names(function: ast.AST) -> set[str]:
    """Names in ``function`` that hold a caught exception, one handed over as an argument
    (annotated as an exception), or one taken from either (``error = exc if ... else ...``)."""
    names: set[str] = set()
    if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        for arg in [*function.args.args, *function.args.kwonlyargs]:
            if arg.annotation is not None and EXCEPTION_TYPE.search(ast.unparse(arg.annotation)):
                names.add(arg.arg)
    for node in ast.walk(function):
        if isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    grew = True
    while grew:
        grew = False
        for node in ast.walk(function):
            if isinstance(node, ast.Assign) and _uses(node.value, names):
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id not in names:
                        names.add(target.id)
                        grew = True
    return names


def _uses(node: ast.AST, names: set[str]) -> bool:
    """Whether ``node`` is one of ``names`` itself (or a choice between such)."""
    if isinstance(node, ast.Name):
        return node.id in names
    if isinstance(node, ast.IfExp):
        return _uses(node.body, names) or _uses(node.orelse, names)
    if isinstance(node, ast.BoolOp):
        return any(_uses(v, names) for v in node.values)
    return False


def _functions(tree: ast.AST) -> Iterator[ast.AST]:
    yield tree
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def amendments(source: str, module: str) -> list[str]:
    """Where ``source`` (the module ``module``, relative to the package) amends an error:
    an assignment to an attribute of a caught or handed-over exception (``exc.hint = ...``,
    ``setattr(exc, ...)``), or a new error built from a caught one's parts."""
    tree = ast.parse(source)
    found = []
    for function in _functions(tree):
        names = _exception_names(function)
        for node in ast.walk(function):
            targets: Sequence[ast.AST] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            for target in targets:
                if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)):
                    continue
                owner = target.value.id
                if ((owner in names or (owner != "self" and target.attr in ERROR_TEXT))
                        and (module, target.attr) not in ALLOWED):
                    found.append(f"{module}:{node.lineno}: assigns {owner}.{target.attr}")
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.id if isinstance(func, ast.Name) else (
                func.attr if isinstance(func, ast.Attribute) else "")
            args = [*node.args, *(k.value for k in node.keywords)]
            if called == "setattr" and args and _uses(args[0], names):
                found.append(f"{module}:{node.lineno}: setattr on {ast.unparse(args[0])}")
            if called == "restated" and module != SUMMARY:
                found.append(f"{module}:{node.lineno}: restates {ast.unparse(func)}")
            if ERROR_CLASS.match(called) and any(_reads_parts(a, names) for a in args):
                found.append(f"{module}:{node.lineno}: re-words a caught error into {called}")
    return sorted(set(found))


def _reads_parts(node: ast.AST, names: set[str]) -> bool:
    """Whether ``node`` reads a diffcdc error's parts off one of ``names``."""
    return any(isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
               and n.value.id in names and n.attr in ("message", "hint", "table", "snapshot")
               for n in ast.walk(node))


def test_no_module_amends_an_error_after_it_was_raised():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        if module != "errors.py":  # the root builds its errors (restated: a new one)
            found += amendments(path.read_text(encoding="utf-8"), module)
    assert found == []


@pytest.mark.parametrize("code", [
    "try:\n    f()\nexcept DiffcdcError as exc:\n    exc.table = exc.table or 'T'\n    raise\n",
    "try:\n    f()\nexcept E as exc:\n    exc.hint = f'{exc.hint}; or more'\n    raise\n",
    "def fail(error: DiffcdcError) -> None:\n    error.message = 'sink s: ' + error.message\n",
    "try:\n    f()\nexcept E as exc:\n    error = exc if ok else other\n    error.snapshot = 's'\n",
    "try:\n    f()\nexcept E as exc:\n    setattr(exc, 'table', 'T')\n",
    "try:\n    f()\nexcept E as exc:\n    raise StateError(f'sink s: {exc.message}') from exc\n",
    "def summary(first: DiffcdcError) -> DiffcdcError:\n    return first.restated('x')\n",
    "first = next(iter(failed.values()))\nfirst.message = f'sinks a, b failed; {first.message}'\n",
])
def test_the_check_finds_each_way_of_amending(code):
    assert amendments(code, "engine/x.py"), code


def test_an_error_built_while_the_engine_works_names_its_table_and_snapshot():
    assert DiffcdcError("x").table is None
    with error_context(table="T"):
        assert (DiffcdcError("x").table, DiffcdcError("x", table="U").table) == ("T", "U")
        with error_context(snapshot="0002.parquet"):
            error = StorageError("disk gone")
            assert str(error) == "table T, snapshot 0002.parquet: disk gone"
            with error_context(snapshot=None):  # a sink's work: its target, not the snapshot
                assert str(StorageError("target gone")) == "table T: target gone"
            assert DiffcdcError("x", snapshot="other").snapshot == "other"
    assert DiffcdcError("x").table is None


def test_a_summary_is_a_new_error_and_leaves_the_one_it_sums_up_as_it_was():
    first = TargetMismatch("gone", table="T", hint="heal it")
    summary = first.restated("sink a: gone (sink(s) b published what was committed)",
                             snapshot="2.parquet")
    assert type(summary) is TargetMismatch and summary.__cause__ is first
    assert str(summary) == ("table T, snapshot 2.parquet: sink a: gone (sink(s) b published "
                            "what was committed) — heal it")
    assert (str(first), first.snapshot, first.args) == ("table T: gone — heal it", None, ("gone",))


class _Coded(StorageError):
    """A plug-in's error whose constructor takes other arguments than a message."""

    def __init__(self, code: int) -> None:
        super().__init__(f"failed with code {code}", table="T")
        self.code = code


def test_a_summary_keeps_the_class_of_an_error_built_with_other_arguments():
    summary = _Coded(7).restated("sink a: failed with code 7")
    assert type(summary) is _Coded and (summary.code, summary.transient) == (7, False)
    assert (str(summary), summary.args) == ("table T: sink a: failed with code 7",
                                            ("sink a: failed with code 7",))


# -- the landing zone names the sink-alone recovery where it refuses -----------------------


ALONE = "diffcdc reload --table T --sink landing --yes"


def _conflict(tmp_path: Path) -> tuple[object, PublishItem]:
    store = open_landing(str(tmp_path / "landing"))
    staged = tmp_path / "staged.parquet"
    staged.write_bytes(b"ours")
    os.makedirs(tmp_path / "landing" / "T")
    (tmp_path / "landing" / "T" / "00000000000000000001.parquet").write_bytes(b"someone else's")
    item = PublishItem(str(staged), "T/00000000000000000001.parquet", file_sha256(str(staged)), 4)
    return store, item


def test_a_publish_conflict_names_the_sink_alone_recovery_where_it_is_raised(tmp_path):
    store, item = _conflict(tmp_path)
    with pytest.raises(PublishConflict) as plain:
        publish_one(store, item)
    with pytest.raises(PublishConflict) as alone:
        publish_one(store, item, alone=ALONE)
    assert plain.value.hint == ("a file this run did not write holds the name; move it away or "
                                "re-create the table (diffcdc reload) — diffcdc never overwrites "
                                "a landing file")
    assert alone.value.hint == (f"{plain.value.hint}; or publish a full image to this sink alone: "
                                f"'{ALONE}'")
    assert alone.value.message == plain.value.message


def test_a_landing_folder_another_writer_changed_names_the_sink_alone_recovery(tmp_path):
    store, _ = _conflict(tmp_path)
    with pytest.raises(LandingZoneMismatch) as caught:
        check_continuation(store, "T", table="T", published_through=0, alone=ALONE)
    text = str(caught.value)
    assert len(text.splitlines()) == 1 and text.startswith("table T, file T/0000")
    assert text.endswith(f"stop it; or publish a full image to this sink alone: '{ALONE}'")


# -- a plan's refusal, without Spark ---------------------------------------------------------


class _Unlisted(Source):
    """A source whose listing fails with an error that names no table (as a library's
    reader would not know it)."""

    def pending(self, committed: Sequence[str]) -> list[PendingSnapshot]:
        raise SourceError("the source cannot be listed", hint="bring it back, then run again")

    def read(self, spark, pending, copies, after):  # pragma: no cover - never reached
        raise AssertionError

    def describe(self) -> str:
        return "nowhere"


def test_a_plans_refusal_names_its_table_in_one_line_with_its_exit_code(tmp_path):
    table = TableConfig(name="T", source=str(tmp_path / "src"), keys=["id"],
                        sinks=[{"type": "open_mirroring", "landing": str(tmp_path / "landing")}])
    state = TableState(str(tmp_path / "state"), table.state_name)
    plan = plan_table(table, state, _Unlisted())
    assert plan.error is not None
    assert str(plan.error) == "table T: the source cannot be listed — bring it back, then run again"
    assert plan.error.exit_code == 1
    report = idle_report(table, str(tmp_path / "state"), plan)
    assert report is not None and report.outcome == "failed"
    assert (report.error["table"], report.error["message"]) == ("T", "the source cannot be listed")


# -- a run's failed sinks (Spark, the in-memory sink) ----------------------------------------


SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def _table(memory_sinks, tmp_path: Path, names: Sequence[str]):
    source = tmp_path / "source"
    os.makedirs(source)
    targets = [memory_sinks.add(n) for n in names]
    return memory_sinks.table("T", str(source), ["id"], targets), targets, str(source)


def _snapshot(source: str, name: str, n: int) -> None:
    rows = [{"id": i, "name": f"v{n}-{i}"} for i in range(1, 4 + n)]
    pq.write_table(pa.Table.from_pylist(rows, SCHEMA), os.path.join(source, name))


def _fails(spark, table: TableConfig, state: str) -> DiffcdcError:
    with pytest.raises(DiffcdcError) as caught:
        run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
    return caught.value


def test_a_failed_sink_is_summed_up_in_a_new_error_and_its_own_is_left_alone(
        spark, memory_sinks, tmp_path):
    table, (a, _b), source = _table(memory_sinks, tmp_path, ["a", "b"])
    state = str(tmp_path / "state")
    _snapshot(source, "1.parquet", 1)
    run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
    a.fail_at("publish", kind="terminal")
    _snapshot(source, "2.parquet", 2)
    error = _fails(spark, table, state)
    assert isinstance(error, TargetMismatch) and error.exit_code == 1
    assert str(error) == ("table T: sink a: injected terminal failure of memory sink a at publish "
                          "of version 2 (sink(s) b published what was committed) — heal the "
                          "memory target")
    own = error.__cause__
    assert isinstance(own, TargetMismatch) and own is not error
    assert str(own) == ("table T: injected terminal failure of memory sink a at publish of "
                        "version 2 — heal the memory target")  # as the sink raised it
    assert error.report.error["message"] == error.message  # type: ignore[attr-defined]


def test_when_no_sink_can_take_a_version_the_summary_names_the_snapshot(
        spark, memory_sinks, tmp_path):
    table, (a, b), source = _table(memory_sinks, tmp_path, ["a", "b"])
    state = str(tmp_path / "state")
    _snapshot(source, "1.parquet", 1)
    run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
    a.fail_at("check", kind="terminal")
    b.fail_at("check", kind="transient")
    _snapshot(source, "2.parquet", 2)
    error = _fails(spark, table, state)
    assert str(error).startswith("table T, snapshot 2.parquet: sinks a, b failed; sink a: "
                                 "injected terminal failure of memory sink a at check")
    assert error.exit_code == 1 and len(str(error).splitlines()) == 1
    assert error.__cause__.snapshot is None  # the sink's own error: about its target
