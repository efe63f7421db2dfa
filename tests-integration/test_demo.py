"""`hatch run demo`: the offline agent session runs and shows what it promises."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
DEMO = REPOSITORY / "docs" / "examples" / "demo.py"
ID = r"[^\"\s]+"  # whatever the store chose


def run_demo() -> str:
    completed = subprocess.run(
        [sys.executable, str(DEMO)],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stderr == ""
    return completed.stdout


def test_the_demo_tells_the_whole_story_in_order() -> None:
    out = run_demo()
    first, rest = out.split("=== Conversation 1 ", 1)
    conversation_1, rest = rest.split("=== Conversation 2", 1)
    second, erasing = rest.split("=== The operator erases", 1)

    # The tools the model is given, and the application's fixed fact.
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

    # The operator's erase: what was erased, and nothing else.
    assert re.search(rf'id {ID}: "wants invoices in EUR"', erasing)
    assert "deleted 1 fact(s)." in erasing
    assert "Stored for 'user-42' now: 0 fact(s)" in erasing
    assert "Stored for 'user-7' (another end user, untouched): 1 fact(s)" in erasing
    assert erasing.rstrip().endswith('> {"fact": "prefers metric units"}')
    assert berlin_id not in erasing
