"""The psych-memory command run in-process through `main`, and its export format.

Quicker than a process per case; the installed script itself is exercised in
test_cli_runs.py. ``memory:`` opens a fresh, empty in-process store each time.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from psych_runtime.memory.admin import ExitCode, main
from psych_runtime.memory.admin._format import (
    ExportFormatError,
    parse_export,
    render_export,
)
from psych_runtime.memory.port import (
    MAX_CONTENT_LENGTH,
    MAX_CREATED_AT,
    MIN_CREATED_AT,
    Memory,
    MemoryKey,
    validate_content,
)

COMMANDS = ["export", "import", "erase", "users", "count", "migrate"]


def test_exit_codes_are_the_documented_ones() -> None:
    assert {code.name: int(code) for code in ExitCode} == {
        "DONE": 0,
        "FAILED": 1,
        "USAGE": 2,
        "UNAVAILABLE": 3,
        "NOT_FOUND": 4,
        "REFUSED": 5,
        "CANCELLED": 6,
    }


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_every_command_has_help(command: str | None, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--help"] if command is None else [command, "--help"]
    assert main(argv) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("Usage: psych-memory")
    if command is None:
        assert "Exit codes: 0 done" in shown
        for name in COMMANDS:
            assert name in shown


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == "psych-memory, version 0.1.0\n"


def test_an_unknown_command_is_bad_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["vacuum", "memory:"]) == ExitCode.USAGE
    assert capsys.readouterr().err.startswith("psych-memory: error: No such command")


def test_an_empty_store_lists_and_counts_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["users", "memory:", "--tenant", "acme"]) == 0
    assert main(["count", "memory:"]) == 0
    assert main(["count", "memory:", "--tenant", "acme", "--user", "u1"]) == 0
    assert capsys.readouterr().out == "0\n0\n"


def test_export_of_an_end_user_without_facts_is_not_found(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["export", "memory:", "--tenant", "acme", "--user", "u1"]) == ExitCode.NOT_FOUND
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "psych-memory: error: --user: the store holds no facts for this end user of this tenant\n"
    )


def test_export_never_overwrites_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kept = tmp_path / "kept.json"
    kept.write_text("mine", encoding="utf-8")
    argv = ["export", "memory:", "--tenant", "acme", "--user", "u1", "-o", str(kept)]
    assert main(argv) == ExitCode.USAGE
    assert "--output: names a file that exists already" in capsys.readouterr().err
    assert kept.read_text(encoding="utf-8") == "mine"


def test_import_writes_the_facts_and_a_second_import_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = MemoryKey("acme", "u1")
    facts = [
        Memory(f"id-{n}", key, f"fact {n}", datetime(2026, 1, 1, 0, 0, n, n, tzinfo=UTC))
        for n in range(3)
    ]
    path = tmp_path / "u1.json"
    path.write_text(render_export(key, facts, datetime.now(UTC), "json"), encoding="utf-8")
    assert main(["import", "memory:", str(path)]) == 0
    assert capsys.readouterr().out == (
        "imported 3 fact(s) in 1 batch(es) of up to 2,000, each whole or not at all; "
        "0 of the 3 were there already\n"
    )


def test_migrating_between_empty_stores_copies_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["migrate", "memory:", "memory:"]) == 0
    assert capsys.readouterr().out.startswith("copied nothing")


# The export format.

_SURROGATES: list[Literal["Cs"]] = ["Cs"]
_CONTROLS_AND_SURROGATES: list[Literal["Cc", "Cs"]] = ["Cc", "Cs"]

_key_part = st.text(
    st.characters(codec="utf-8", exclude_categories=_CONTROLS_AND_SURROGATES),
    min_size=1,
    max_size=20,
).filter(lambda text: text == text.strip())


def _is_valid_content(text: str) -> bool:
    try:
        validate_content(text)
    except ValueError:
        return False
    return len(text) <= MAX_CONTENT_LENGTH


_content = st.text(
    st.characters(codec="utf-8", exclude_categories=_SURROGATES), min_size=1, max_size=200
).filter(_is_valid_content)
_moment = st.datetimes(
    min_value=datetime(1971, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)


@given(
    tenant=_key_part,
    end_user=_key_part,
    entries=st.lists(st.tuples(_content, _moment), max_size=8),
    layout=st.sampled_from(["json", "jsonl"]),
)
def test_an_export_reads_back_exactly(
    tenant: str, end_user: str, entries: list[tuple[str, datetime]], layout: str
) -> None:
    key = MemoryKey(tenant, end_user)
    facts = tuple(
        Memory(f"f{index}", key, content, moment) for index, (content, moment) in enumerate(entries)
    )
    text = render_export(key, facts, datetime.now(UTC), layout)  # type: ignore[arg-type]
    read = parse_export(text)
    assert read.key == key
    assert read.facts == facts


def test_an_export_is_the_documented_document() -> None:
    key = MemoryKey("acme", "u1")
    fact = Memory("a1", key, "ships to Berlin", datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
    document = json.loads(render_export(key, [fact], datetime(2026, 3, 2, tzinfo=UTC), "json"))
    assert document == {
        "format": "psych-memory-export",
        "version": 1,
        "tenant": "acme",
        "end_user_id": "u1",
        "exported_at": "2026-03-02T00:00:00.000000Z",
        "facts": [
            {"id": "a1", "content": "ships to Berlin", "created_at": "2026-03-01T12:00:00.000000Z"}
        ],
    }


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"format": "other"}, "'format'"),
        ({"version": True}, "'version'"),
        ({"tenant": " acme"}, "tenant"),
        ({"exported_at": "2026-03-02T00:00:00+01:00"}, "'exported_at'"),
        ({"facts": {}}, "'facts'"),
        ({"extra": 1}, "fields this format does not define"),
        ({"facts": [{"id": "a1", "content": "x"}]}, "created_at"),
        (
            {"facts": [{"id": "a1", "content": " ", "created_at": "2026-03-01T12:00:00.000000Z"}]},
            "content",
        ),
        (
            {
                "facts": [
                    {"id": "a1", "content": "x", "created_at": "2026-03-01T12:00:00.000000Z"},
                    {"id": "a1", "content": "y", "created_at": "2026-03-01T12:00:00.000000Z"},
                ]
            },
            "fact 2 (line 1) has the id of an earlier fact",
        ),
    ],
)
def test_a_broken_export_is_refused_with_where_and_which_rule(
    change: dict[str, object], words: str
) -> None:
    document: dict[str, object] = {
        "format": "psych-memory-export",
        "version": 1,
        "tenant": "acme",
        "end_user_id": "u1",
        "exported_at": "2026-03-02T00:00:00.000000Z",
        "facts": [],
    }
    document.update(change)
    with pytest.raises(ExportFormatError) as caught:
        parse_export(json.dumps(document))
    assert words in str(caught.value)


HEADER_LINE = json.dumps(
    {
        "format": "psych-memory-export",
        "version": 1,
        "tenant": "acme",
        "end_user_id": "u1",
        "exported_at": "2026-03-02T00:00:00.000000Z",
        "facts_count": 1,
    }
)
FACT_LINE = '{"id": "a1", "content": "x", "created_at": "2026-03-01T12:00:00.000000Z"}'


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[1]\n" + FACT_LINE, "must hold a JSON object"),
        (
            HEADER_LINE + "\n" + FACT_LINE + "\n" + FACT_LINE.replace("a1", "a2"),
            "'facts_count' must be the number",
        ),
        (HEADER_LINE + "\n[]", "line 2 must be a JSON object"),
        (HEADER_LINE + "\nnot json", "line 2 is not JSON"),
        (HEADER_LINE.replace('"acme"', "7") + "\n" + FACT_LINE, "strings 'tenant'"),
        (HEADER_LINE + "\n" + FACT_LINE.replace("2026-03-01", "2026-13-01"), "'created_at'"),
        ("   \n ", "is empty"),
    ],
)
def test_a_broken_json_lines_export_is_refused(text: str, words: str) -> None:
    with pytest.raises(ExportFormatError) as caught:
        parse_export(text)
    assert words in str(caught.value)


def test_a_json_lines_export_without_facts_is_its_header() -> None:
    read = parse_export(HEADER_LINE.replace('"facts_count": 1', '"facts_count": 0'))
    assert read.key == MemoryKey("acme", "u1")
    assert read.facts == ()


# Exactly the published format, and nothing else.

_FACT = '{"id": "a1", "content": "x", "created_at": "%s"}'
_JSON_HEAD = (
    '{"format": "psych-memory-export", "version": 1, "tenant": "acme", "end_user_id": "u1", '
    '"exported_at": "2026-03-02T00:00:00.000000Z", "facts": ['
)


@pytest.mark.parametrize(
    "moment",
    [
        "2026-03-01T12:00:00Z",  # no microseconds
        "2026-03-01T12:00:00.000Z",  # milliseconds only
        "2026-03-01 12:00:00.000000Z",  # a space for the T
        "20260301T120000.000000Z",  # basic format
        "2026-W09-7T12:00:00.000000Z",  # a week date
        "2026-060T12:00:00.000000Z",  # an ordinal date
        "2026-03-01T12:00:00.000000+00:00",  # an offset for the Z
        "2026-03-01T12:00:00.000000z",
        "2026-03-01t12:00:00.000000Z",
        "\uff12\uff10\uff12\uff16-03-01T12:00:00.000000Z",  # fullwidth digits
        "2026-03-01T12:00:00,000000Z",  # a decimal comma
    ],
)
def test_a_time_in_any_other_form_is_refused(moment: str) -> None:
    with pytest.raises(ExportFormatError) as caught:
        parse_export(_JSON_HEAD + _FACT % moment + "]}")
    assert str(caught.value) == (
        "fact 1 (line 1) 'created_at' must be a time in UTC written YYYY-MM-DDTHH:MM:SS.ffffffZ "
        "(ISO 8601 extended format, with 'T', microseconds and 'Z')"
    )


@pytest.mark.parametrize(
    "moment",
    ["10000-01-01T00:00:00.000000Z", "0000-12-31T23:59:59.999999Z", "-0001-01-01T00:00:00.000000Z"],
)
def test_a_time_outside_the_range_a_store_keeps_is_refused_naming_the_range(moment: str) -> None:
    with pytest.raises(ExportFormatError) as caught:
        parse_export(_JSON_HEAD + _FACT % moment + "]}")
    assert str(caught.value) == (
        "fact 1 (line 1) 'created_at' must be between 0001-01-01T00:00:00.000000Z and "
        "9999-12-31T23:59:59.999999Z, the times a store keeps"
    )


def test_both_ends_of_the_range_are_read_exactly() -> None:
    text = (
        _JSON_HEAD
        + _FACT % "0001-01-01T00:00:00.000000Z"
        + ", "
        + (_FACT % "9999-12-31T23:59:59.999999Z").replace("a1", "a2")
        + "]}"
    )
    assert [fact.created_at for fact in parse_export(text).facts] == [
        MIN_CREATED_AT,
        MAX_CREATED_AT,
    ]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (
            _JSON_HEAD + '{"id": "a1", "id": "a2", "content": "x", '
            '"created_at": "2026-03-01T12:00:00.000000Z"}]}',
            "fact 1 (line 1) repeats a field of one JSON object",
        ),
        (_JSON_HEAD.replace('"version": 1,', '"version": 1, "version": 1,') + "]}", "repeats"),
        (_JSON_HEAD + "]" + ', "facts": []}', "repeats a field"),
        (
            _JSON_HEAD.replace('"version": 1', '"version": 1' + "0" * 5000) + "]}",
            "holds an integer of more than 20 digits",
        ),
        (_JSON_HEAD.replace('"version": 1', '"version": NaN') + "]}", "holds NaN"),
        (_JSON_HEAD + "[" * 100_000 + "]" * 100_000 + "]}", "fact 1 (line 1) nests JSON"),
        (_JSON_HEAD + "]}" + "{}", "holds more than one JSON document"),
        (_JSON_HEAD + "]," + "}", "is not JSON"),
    ],
)
def test_json_the_format_does_not_allow_is_refused(text: str, words: str) -> None:
    with pytest.raises(ExportFormatError) as caught:
        parse_export(text)
    assert words in str(caught.value)
    assert "set_int_max_str_digits" not in str(caught.value)


def test_json_lines_are_split_at_line_feeds_only() -> None:
    # U+2028, U+2029 and the other line breaks of str.splitlines are legal
    # inside a JSON string, and are not the ends of lines.
    content = "one\u2028two\u2029three"
    header = json.loads(HEADER_LINE) | {"end_user_id": "u\u2028\u2029v"}
    text = (
        json.dumps(header, ensure_ascii=False)
        + "\n"
        + json.dumps(
            {"id": "a1", "content": content, "created_at": "2026-03-01T12:00:00.000000Z"},
            ensure_ascii=False,
        )
        + "\r\n"
    )
    read = parse_export(text)
    assert read.key == MemoryKey("acme", "u\u2028\u2029v")
    assert [fact.content for fact in read.facts] == [content]


def test_an_export_escapes_the_separators_other_readers_split_lines_at() -> None:
    key = MemoryKey("acme", "u\u2028v")
    fact = Memory("a1", key, "one\u2028two\u2029three", datetime(2026, 3, 1, tzinfo=UTC))
    text = render_export(key, [fact], datetime(2026, 3, 2, tzinfo=UTC), "jsonl")
    assert len(text.splitlines()) == 2
    assert parse_export(text).facts == (fact,)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (HEADER_LINE + "\n\n" + FACT_LINE, "line 2 must hold one whole fact"),
        (HEADER_LINE + "\n" + FACT_LINE[:-1] + "\n}", "line 2 must hold one whole fact"),
        (HEADER_LINE + " " + FACT_LINE, "line 1 must end after its JSON object"),
        (HEADER_LINE[:-1] + "\n}\n" + FACT_LINE, "line 1 must hold the whole header object"),
    ],
)
def test_each_json_line_holds_one_whole_object(text: str, words: str) -> None:
    with pytest.raises(ExportFormatError) as caught:
        parse_export(text)
    assert words in str(caught.value)


def test_an_id_repeated_far_from_its_first_fact_is_refused_naming_the_second() -> None:
    # The ids seen are checked in chunks of 10,000, across chunks too.
    key = MemoryKey("acme", "u1")
    moment = datetime(2026, 3, 1, tzinfo=UTC)
    facts = [Memory(f"f{n}", key, "x", moment) for n in range(10_004)]
    facts.append(Memory("f3", key, "y", moment))
    with pytest.raises(ExportFormatError) as caught:
        parse_export(render_export(key, facts, moment, "jsonl"))
    assert str(caught.value) == "line 10006 has the id of an earlier fact"
