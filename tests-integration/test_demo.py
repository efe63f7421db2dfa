"""`hatch run demo`: the offline agent session runs and shows what it promises.

Each test runs the demo in its own working directory, where the demo keeps
its SQLite file, exactly as a newcomer's `hatch run demo` does at the root.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
DEMO = REPOSITORY / "docs" / "examples" / "demo.py"
ID = r"[^\"\s]+"  # whatever the store chose


def run_demo(workdir: Path, *args: str) -> str:
    completed = subprocess.run(
        [sys.executable, str(DEMO), *args],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stderr == ""
    return completed.stdout


def test_the_demo_tells_the_whole_story_in_order(tmp_path: Path) -> None:
    out = run_demo(tmp_path)
    first, rest = out.split("=== Conversation 1 ", 1)
    conversation_1, rest = rest.split("=== Conversation 2", 1)
    second, after = rest.split("=== After the session", 1)

    # The store, the tools the model is given, and the application's fixed fact.
    assert f"SqliteMemory, file {tmp_path.resolve() / 'psych-memory-demo.sqlite3'}" in first
    assert "Facts stored for 'user-42' by earlier runs: 0" in first
    assert "remember(content)" in first
    assert "forget(memory_id)" in first
    assert "prefers metric units" in first

    # Conversation 1: the preference is remembered, small talk is not.
    remembered = re.search(
        r'model \| calls remember \{"content": "prefers the Berlin warehouse"\}\n'
        rf' tool \| \{{"remembered":true,"id":"({ID})"\}}',
        conversation_1,
    )
    assert remembered is not None, conversation_1
    berlin_id = remembered.group(1)
    assert conversation_1.count("calls remember") == 2
    assert "Nice weather" in conversation_1

    # Conversation 2: the prompt carries the fact with its id; the model
    # forgets it by that id; a write for another user is refused.
    entry = json.dumps({"id": berlin_id, "fact": "prefers the Berlin warehouse"})
    assert f"    > {entry}\n" in second
    assert '"end_user_id": "user-7"' in second
    assert "'end_user_id' cannot be passed" in second
    assert "(is_error: the call was refused and nothing was stored)" in second
    assert f'model | calls forget {{"memory_id": "{berlin_id}"}}\n tool | {{"forgotten":true}}' in (
        second
    )
    assert "I have no warehouse preference on file for you." in second

    # What is left for the next run: the invoice preference only.
    assert "Stored for 'user-42': 1 fact(s)" in after
    assert re.search(rf'id {ID}: "wants invoices in EUR"', after)
    assert berlin_id not in after
    assert "hatch run demo --erase" in after


def test_the_next_run_recalls_what_the_last_one_remembered(tmp_path: Path) -> None:
    run_demo(tmp_path)
    kept = re.search(rf'id ({ID}): "wants invoices in EUR"', run_demo(tmp_path))
    assert kept is not None
    second_run = run_demo(tmp_path)
    first_prompt = second_run.split(" user | ", 1)[0]

    assert "Facts stored for 'user-42' by earlier runs: 1" in second_run
    entry = json.dumps({"id": kept.group(1), "fact": "wants invoices in EUR"})
    assert f"    > {entry}\n" in first_prompt
    # Told again, the model does not store the known fact a second time.
    assert "I already have that on file from an earlier conversation." in second_run
    assert second_run.count('calls remember {"content": "wants invoices in EUR"}') == 0


def test_erase_when_asked_deletes_the_end_user_and_nobody_else(tmp_path: Path) -> None:
    run_demo(tmp_path)
    erasing = run_demo(tmp_path, "--erase")

    assert "=== The operator erases end user 'user-42'" in erasing
    assert "Conversation" not in erasing
    assert re.search(rf'id {ID}: "wants invoices in EUR"', erasing)
    assert "deleted 1 fact(s)." in erasing
    assert "Stored for 'user-42' now: 0 fact(s)" in erasing
    assert "Stored for 'user-7' (another end user, untouched): 1 fact(s)" in erasing
    assert erasing.rstrip().endswith('> {"fact": "prefers metric units"}')
    assert "Facts stored for 'user-42' by earlier runs: 0" in run_demo(tmp_path)


def test_the_in_process_store_keeps_nothing_on_disk(tmp_path: Path) -> None:
    out = run_demo(tmp_path, "--store", "memory")
    assert "InProcessMemory, this process only" in out
    assert "=== After the session" in out
    # (Coverage, when measuring, may leave its own data files here.)
    assert [path for path in tmp_path.iterdir() if "sqlite3" in path.name] == []
