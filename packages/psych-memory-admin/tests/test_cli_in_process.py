"""psych-memory's commands run in-process through `main`, on SQLite files.

The same paths as the runs of the installed script, quicker and measured by
coverage; the script itself is exercised in test_cli_runs.py.
"""

from __future__ import annotations

import errno
import io
import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from psych_runtime.memory.admin import ExitCode, main, open_memory
from psych_runtime.memory.port import Memory

FACTS = [
    ("acme", "u1", "ships to Berlin"),
    ("acme", "u1", "prefers email"),
    ("acme", "u2", "pays by invoice"),
    ("globex", "u9", "another tenant's fact"),
]


@pytest.fixture(autouse=True)
def _here(
    require_schemes: Callable[..., None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_schemes("sqlite")
    monkeypatch.chdir(tmp_path)


def seed(url: str, facts: list[tuple[str, str, str]]) -> None:
    async def write() -> None:
        async with open_memory(url) as store:
            for tenant, end_user, content in facts:
                await store.remember(tenant, end_user, content)

    anyio.run(write)


def facts_of(url: str, tenant: str, end_user: str) -> tuple[Memory, ...]:
    async def read() -> tuple[Memory, ...]:
        async with open_memory(url) as store:
            return await store.recall(tenant, end_user)

    return anyio.run(read)


def test_export_to_stdout_as_json_lines(capsys: pytest.CaptureFixture[str]) -> None:
    seed("sqlite:///a.db", FACTS)
    assert (
        main(["export", "sqlite:///a.db", "--tenant", "acme", "--user", "u1", "--format", "jsonl"])
        == 0
    )
    header, *lines = capsys.readouterr().out.splitlines()
    assert json.loads(header)["facts_count"] == 2
    stored = facts_of("sqlite:///a.db", "acme", "u1")
    assert [json.loads(line)["id"] for line in lines] == [fact.id for fact in stored]


def test_erase_prints_a_text_receipt_with_the_scrub(capsys: pytest.CaptureFixture[str]) -> None:
    seed("sqlite:///a.db", FACTS)
    assert main(["erase", "sqlite:///a.db", "--tenant", "acme", "--user", "u1", "--yes"]) == 0
    receipt = capsys.readouterr().out.splitlines()
    assert receipt[0] == "Erasure receipt"
    assert "facts deleted:  2" in receipt
    assert receipt[-1].startswith("deleted bytes:  scrubbed")
    assert facts_of("sqlite:///a.db", "acme", "u1") == ()
    assert len(facts_of("sqlite:///a.db", "acme", "u2")) == 1


def test_import_refuses_a_store_holding_other_facts_for_the_end_user(
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed("sqlite:///a.db", FACTS)
    assert (
        main(["export", "sqlite:///a.db", "--tenant", "acme", "--user", "u1", "-o", "u1.json"]) == 0
    )
    seed("sqlite:///b.db", [("acme", "u1", "something else")])
    before = facts_of("sqlite:///b.db", "acme", "u1")
    assert main(["import", "sqlite:///b.db", "u1.json"]) == ExitCode.REFUSED
    assert (
        "URL: this end user's facts in the store are not the first facts" in capsys.readouterr().err
    )
    assert facts_of("sqlite:///b.db", "acme", "u1") == before


def test_import_refuses_an_id_another_fact_holds(capsys: pytest.CaptureFixture[str]) -> None:
    seed("sqlite:///a.db", FACTS)
    assert (
        main(["export", "sqlite:///a.db", "--tenant", "acme", "--user", "u1", "-o", "u1.json"]) == 0
    )
    document = json.loads(Path("u1.json").read_text(encoding="utf-8"))
    document["end_user_id"] = "u7"
    Path("u7.json").write_text(json.dumps(document), encoding="utf-8")
    # The same ids, for another end user, in the store that holds them.
    assert main(["import", "sqlite:///a.db", "u7.json"]) == ExitCode.REFUSED
    assert "FILE: a fact was refused: memories[0].id" in capsys.readouterr().err
    assert facts_of("sqlite:///a.db", "acme", "u7") == ()


def test_import_of_a_file_that_is_not_utf8(capsys: pytest.CaptureFixture[str]) -> None:
    Path("latin1.json").write_bytes('{"tenant": "M\xfcller"}'.encode("latin-1"))
    assert main(["import", "sqlite:///a.db", "latin1.json"]) == ExitCode.USAGE
    assert capsys.readouterr().err == "psych-memory: error: FILE: is not UTF-8 text\n"
    assert not Path("a.db").exists()


def test_migrate_verbose_reports_each_end_user_and_then_nothing_to_copy(
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed("sqlite:///a.db", FACTS)
    assert main(["migrate", "sqlite:///a.db", "sqlite:///b.db", "--verbose", "--jobs", "2"]) == 0
    captured = capsys.readouterr()
    assert captured.out == (
        "copied 4 fact(s); 4 fact(s) of 3 end user(s) are now in both stores, counts checked\n"
    )
    assert captured.err.count("end users done:") == 3
    assert main(["migrate", "sqlite:///a.db", "sqlite:///b.db", "--tenant", "acme"]) == 0
    assert capsys.readouterr().out.startswith("copied nothing: the destination already held all 3")


def test_migrate_refuses_an_id_taken_in_the_destination(capsys: pytest.CaptureFixture[str]) -> None:
    seed("sqlite:///a.db", FACTS)
    assert (
        main(["export", "sqlite:///a.db", "--tenant", "acme", "--user", "u1", "-o", "u1.json"]) == 0
    )
    document = json.loads(Path("u1.json").read_text(encoding="utf-8"))
    document["end_user_id"] = "u0"
    Path("u0.json").write_text(json.dumps(document), encoding="utf-8")
    assert main(["import", "sqlite:///b.db", "u0.json"]) == 0
    capsys.readouterr()
    assert main(["migrate", "sqlite:///a.db", "sqlite:///b.db", "--jobs", "1"]) == ExitCode.REFUSED
    assert "TO_URL: refused a fact: memories[0].id" in capsys.readouterr().err


def test_a_file_that_is_not_a_database_is_unavailable_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    Path("a.db").write_bytes(b"this is not a database file, but it is long enough" * 200)
    assert main(["count", "sqlite:///a.db"]) == ExitCode.UNAVAILABLE
    captured = capsys.readouterr()
    assert captured.err.startswith("psych-memory: error: URL: open failed: ")
    assert "not a SQLite database" in captured.err
    assert captured.err.count("\n") == 1


class Terminal(io.StringIO):
    """Text that says it is a terminal, as a console's streams do."""

    def isatty(self) -> bool:
        return True


def test_migrate_on_a_terminal_draws_a_bar_with_facts_per_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seed("sqlite:///a.db", FACTS)
    screen = Terminal()
    monkeypatch.setattr(sys, "stderr", screen)
    assert main(["migrate", "sqlite:///a.db", "sqlite:///b.db"]) == 0
    drawn = screen.getvalue()
    assert "copying" in drawn
    assert "facts/s" in drawn
    assert "4/4" in drawn


@pytest.mark.parametrize(("answer", "code"), [("n\n", ExitCode.CANCELLED), ("y\n", ExitCode.DONE)])
def test_erase_on_a_terminal_asks_first(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], answer: str, code: int
) -> None:
    seed("sqlite:///a.db", FACTS)
    monkeypatch.setattr(sys, "stdin", Terminal(answer))
    assert main(["erase", "sqlite:///a.db", "--tenant", "acme", "--user", "u1"]) == code
    shown = capsys.readouterr()
    # The question goes to standard error, never into the receipt.
    assert "Erase all 2 fact(s) of this end user from sqlite:///a.db?" in shown.err
    assert "Erase all" not in shown.out
    assert len(facts_of("sqlite:///a.db", "acme", "u1")) == (2 if code else 0)


@pytest.mark.parametrize("unnamed", [True, False], ids=["unnamed-temporary", "named-temporary"])
def test_export_to_a_file_is_linked_complete_and_leaves_no_temporary(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    unnamed: bool,
) -> None:
    seed("sqlite:///a.db", FACTS)
    if not unnamed:
        # A system without files that have no name: a hidden temporary name.
        monkeypatch.setattr(os, "O_TMPFILE", 0, raising=False)
    argv = ["export", "sqlite:///a.db", "--tenant", "acme", "--user", "u1", "-o", "u1.json"]
    assert main(argv) == ExitCode.DONE
    assert capsys.readouterr().err == "psych-memory: wrote 2 fact(s) to the --output file\n"
    document = json.loads(Path("u1.json").read_text(encoding="utf-8"))
    assert [fact["content"] for fact in document["facts"]] == ["ships to Berlin", "prefers email"]
    assert Path("u1.json").stat().st_mode & 0o077 == 0
    assert sorted(path.name for path in tmp_path.iterdir() if "a.db" not in path.name) == [
        "u1.json"
    ]
    # A second export to the same name is refused, and leaves no temporary either.
    assert main(argv) == ExitCode.USAGE
    assert "--output: names a file that exists already" in capsys.readouterr().err
    assert sorted(path.name for path in tmp_path.iterdir() if "a.db" not in path.name) == [
        "u1.json"
    ]


EXPORT_U1 = ["export", "sqlite:///a.db", "--tenant", "acme", "--user", "u1", "-o", "u1.json"]


def others_than_the_store(tmp_path: Path) -> list[str]:
    return sorted(path.name for path in tmp_path.iterdir() if "a.db" not in path.name)


@pytest.mark.parametrize("unnamed", [True, False], ids=["unnamed-temporary", "named-temporary"])
def test_ctrl_c_before_the_export_has_its_name_cancels_and_leaves_nothing(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    unnamed: bool,
) -> None:
    seed("sqlite:///a.db", FACTS)
    if not unnamed:
        monkeypatch.setattr(os, "O_TMPFILE", 0, raising=False)
    fsync = os.fsync

    def interrupted_while_synced(descriptor: int) -> None:
        # The operator's Ctrl-C, while the export is synced to disk.
        os.kill(os.getpid(), signal.SIGINT)
        fsync(descriptor)

    monkeypatch.setattr(os, "fsync", interrupted_while_synced)
    assert main(EXPORT_U1) == ExitCode.CANCELLED
    assert capsys.readouterr().err == "psych-memory: error: cancelled: nothing more was done\n"
    assert others_than_the_store(tmp_path) == []
    # The operator's Ctrl-C is the default again once the command returned.
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_ctrl_c_once_the_export_has_its_name_says_it_was_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seed("sqlite:///a.db", FACTS)
    link = os.link

    def interrupted_once_linked(*args: object, **options: object) -> None:
        link(*args, **options)  # type: ignore[arg-type]
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(os, "link", interrupted_once_linked)
    assert main(EXPORT_U1) == ExitCode.DONE
    assert capsys.readouterr().err == "psych-memory: wrote 2 fact(s) to the --output file\n"
    assert len(json.loads(Path("u1.json").read_text(encoding="utf-8"))["facts"]) == 2
    assert others_than_the_store(tmp_path) == ["u1.json"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.parametrize(
    ("error", "renamed"),
    [(errno.EPERM, True), (errno.ENOTSUP, True), (errno.EIO, False)],
    ids=["no-hard-links", "not-supported", "input-output-error"],
)
def test_a_file_system_without_hard_links_gets_the_export_renamed_into_place(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    error: int,
    renamed: bool,
) -> None:
    seed("sqlite:///a.db", FACTS)
    monkeypatch.setattr(os, "O_TMPFILE", 0, raising=False)

    def refused(*_args: object, **_options: object) -> None:
        raise OSError(error, os.strerror(error))

    monkeypatch.setattr(os, "link", refused)
    if renamed:
        assert main(EXPORT_U1) == ExitCode.DONE
        assert len(json.loads(Path("u1.json").read_text(encoding="utf-8"))["facts"]) == 2
        assert others_than_the_store(tmp_path) == ["u1.json"]
    else:
        assert main(EXPORT_U1) == ExitCode.USAGE
        assert capsys.readouterr().err == (
            f"psych-memory: error: --output: cannot be created ({os.strerror(error)})\n"
        )
        assert others_than_the_store(tmp_path) == []
