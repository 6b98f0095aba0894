"""What every command shares (:mod:`devshare.cli.common`): bad input as one ``error:`` line and exit 2,
output formats, the cluster file, the connection to a live cluster, the console tables print on."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from devshare.cli.common import (
    EXIT_BAD_INPUT,
    NO_CLUSTER_HINT,
    check_event_loop,
    connect_live,
    emit,
    fail,
    load_cluster,
    log_level,
    table_console,
    user_errors,
)
from devshare.model.errors import InvalidDevice, InvalidInput
from support.extender import device, node
from support.imports import without_package


def error_line(capsys: pytest.CaptureFixture[str], run: Callable[[], Any]) -> str:
    """The one stderr line of a command part that must stop with exit 2."""
    with pytest.raises(typer.Exit) as e:
        run()
    assert e.value.exit_code == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    [line] = err.splitlines()
    assert line.startswith("error: ")
    return line


def test_fail_prints_one_line_and_returns_the_exit_to_raise(capsys: pytest.CaptureFixture[str]) -> None:
    exit_ = fail("no such thing", code=1)
    assert exit_.exit_code == 1
    assert capsys.readouterr().err == "error: no such thing\n"


@pytest.mark.parametrize(("text", "level"), [("debug", logging.DEBUG), ("INFO", logging.INFO),
                                             ("Warning", logging.WARNING), ("error", logging.ERROR)])
def test_log_levels_are_read_in_any_case(text: str, level: int) -> None:
    assert log_level(text) == level


@pytest.mark.parametrize("text", ["critical", "warn", "verbose", ""])
def test_other_log_levels_are_refused_with_the_choices(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    line = error_line(capsys, lambda: log_level(text))
    assert line == f"error: unknown --log-level {text!r}: use debug, info, warning or error"


def test_event_loops_are_checked_before_serving(capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    check_event_loop("asyncio")
    check_event_loop("auto")
    assert error_line(capsys, lambda: check_event_loop("trio")) == \
        "error: unknown --event-loop 'trio': use one of auto, uvloop, asyncio"
    without_package(monkeypatch, "uvloop")
    check_event_loop("auto")  # falls back to asyncio
    line = error_line(capsys, lambda: check_event_loop("uvloop"))
    assert line.startswith("error: --event-loop uvloop: ") and "pip install uvloop" in line


def raise_(e: BaseException) -> Callable[[], None]:
    def run() -> None:
        with user_errors():
            raise e
    return run


@pytest.mark.parametrize(("error", "line"), [
    (InvalidDevice("minor is missing", field="c.yaml: spec.devices[0]"),
     "error: c.yaml: spec.devices[0]: minor is missing"),
    (FileNotFoundError(2, "No such file or directory", "c.yaml"), "error: c.yaml: no such file"),
    (IsADirectoryError(21, "Is a directory", "conf"), "error: conf: is a directory, expected a file"),
    (PermissionError(13, "Permission denied", "/etc/secret"), "error: /etc/secret: permission denied"),
    (json.JSONDecodeError("Expecting value", "{\n x", 3), "error: not valid JSON: Expecting value (line 2, column 2)"),
])
def test_bad_input_becomes_one_line(error: BaseException, line: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert error_line(capsys, raise_(error)) == line


def test_a_binary_file_is_one_line_not_a_stack_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "cluster.yaml"
    f.write_bytes(b"kind: Node\n\xd0\xff")
    line = error_line(capsys, raise_(UnicodeDecodeError("utf-8", f.read_bytes(), 11, 12, "invalid continuation byte")))
    assert line == ("error: a file given is not a text file (byte 0xd0 at position 11 is not UTF-8): "
                    "give a YAML or JSON file")
    named = line.replace("error: a file given is", f"error: {f}:")  # the cluster file's reader names the file
    assert error_line(capsys, lambda: load_cluster_in_user_errors(f)) == named


def load_cluster_in_user_errors(path: Path) -> None:
    with user_errors():
        load_cluster(path)


def test_a_yaml_error_names_where(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        yaml.safe_load("a: [1,\n")
    except yaml.YAMLError as e:
        err = e
    line = error_line(capsys, raise_(err))
    assert line.startswith("error: input, line ") and "not valid YAML" in line


def test_other_errors_are_not_hidden() -> None:
    with pytest.raises(RuntimeError), user_errors():
        raise RuntimeError("a bug, not bad input")


def test_emit_prints_json_yaml_or_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    data = {"nodes": [{"name": "n0", "gpus": 2}]}
    emit(data, "json")
    assert json.loads(capsys.readouterr().out) == data
    emit(data, "yaml")
    assert yaml.safe_load(capsys.readouterr().out) == data
    seen: list[Any] = []
    emit(data, "table", seen.append)
    assert seen == [data]
    assert error_line(capsys, lambda: emit(data, "xml", seen.append)) == \
        "error: unknown output format 'xml': use json, yaml or table"
    assert error_line(capsys, lambda: emit(data, "table")) == \
        "error: unknown output format 'table': use json, yaml"  # a command without a table


def test_a_cluster_file_with_no_object_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing\n---\n")
    with pytest.raises(InvalidInput) as e:
        load_cluster(empty)
    assert e.value.field == str(empty)
    assert "no Node, Device or Pod object in the file" in e.value.message and "examples/cluster.yaml" in e.value.message
    full = tmp_path / "c.yaml"
    full.write_text(yaml.safe_dump_all([node("n0"), device("n0", 2)]))
    assert len(load_cluster(full).objects()) == 2


def test_no_cluster_configuration_points_at_the_cluster_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(InvalidInput) as e:
        connect_live(None)
    assert str(e.value).endswith(NO_CLUSTER_HINT)
    assert "cannot load the cluster configuration" in str(e.value)


def test_tables_are_as_wide_as_they_need_when_piped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    assert table_console().width == 10_000  # pytest's stdout is not a terminal
    monkeypatch.setenv("COLUMNS", "80")
    assert table_console().width == 80
