"""Configuration file readers: any bytes give a document or a one-line problem."""

from __future__ import annotations

import datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuprobe.containers.configfile import FileProblem, parse_json, parse_toml, parse_yaml


def test_errors_carry_line_and_column() -> None:
    assert parse_toml("/f.toml", b"a = 1\nb = \n") == FileProblem(
        "/f.toml", "is not valid TOML: Invalid value (at line 2, column 5)"
    )
    assert parse_json("/f.json", b'{"a": 1,\n "b": }') == FileProblem(
        "/f.json", "is not valid JSON: line 2 column 7: Expecting value"
    )
    assert parse_yaml("/f.yaml", b"a:\n  - [\n") == FileProblem(
        "/f.yaml",
        "is not valid YAML: line 3 column 1: expected the node content, but found '<stream end>'",
    )


def test_not_utf8_names_the_byte() -> None:
    assert parse_toml("/f", b"a = '\xff'") == FileProblem("/f", "is not UTF-8 text (byte 5)")


def test_yaml_dates_python_cannot_build_are_problems() -> None:
    problem = parse_yaml("/f.yaml", b"when: 2024-13-45\n")
    assert isinstance(problem, FileProblem)
    assert problem.problem.startswith("is not valid YAML: ValueError: month must be in 1..12")


DOCUMENT_TYPES = (dict, list, str, int, float, bool, bytes, set, datetime.date, type(None))


def assert_document_or_problem(result: Any) -> None:
    if isinstance(result, FileProblem):
        assert result.path == "/f"
        assert result.problem.startswith("is not ") and "\n" not in result.problem
    else:
        assert isinstance(result, DOCUMENT_TYPES)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=500))
def test_any_bytes_parse_or_give_a_problem(raw: bytes) -> None:
    for parse in (parse_toml, parse_json, parse_yaml):
        assert_document_or_problem(parse("/f", raw))


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="[]{}:-#=\"' \n\tab0.,!&*|>%@`?\\", max_size=200))
def test_structured_garbage_parses_or_gives_a_problem(text: str) -> None:
    for parse in (parse_toml, parse_json, parse_yaml):
        assert_document_or_problem(parse("/f", text.encode()))
