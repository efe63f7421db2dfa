"""The cost of instrument(): measured beside the bare store in the same run."""

from __future__ import annotations


def main() -> None:
    raise SystemExit("not written yet")


if __name__ == "__main__":
    main()
