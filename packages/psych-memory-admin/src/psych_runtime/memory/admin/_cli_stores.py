"""Naming what fails by the ``psych-memory`` command's arguments."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

from psych_runtime.memory.port import InvalidInputError, MemoryKey, validate_scope

from ._commands import KEY_OPTIONS, one_line
from ._errors import FactsForgottenError, MissingCapabilityError, OperationRefusedError
from ._exit import CommandError, ExitCode

__all__ = ["checked_key", "checked_tenant", "refusals_naming"]


def checked_key(tenant: str, end_user_id: str) -> MemoryKey:
    """The key the options name, or a usage error naming the option at fault."""
    try:
        return MemoryKey(tenant, end_user_id)
    except InvalidInputError as exc:
        option = KEY_OPTIONS.get(exc.argument, exc.argument)
        raise CommandError(option, exc.rule, ExitCode.USAGE) from None


def checked_tenant(tenant: str) -> str:
    """The tenant the option names, or a usage error naming ``--tenant``."""
    try:
        return validate_scope(tenant)
    except InvalidInputError as exc:
        raise CommandError("--tenant", exc.rule, ExitCode.USAGE) from None


@contextmanager
def refusals_naming(
    arguments: Mapping[str, str],
    rule: Callable[[OperationRefusedError], str | None] = lambda _: None,
) -> Iterator[None]:
    """Turn an operation's refusal into the command's, naming the argument of the store at fault.

    ``arguments`` maps each store's role (``"store"``, ``"source"``,
    ``"target"``) to the argument that names it; ``rule`` words the
    command's own refusals, ``None`` leaving those every command shares.

    Raises:
        CommandError: The operation was refused (`ExitCode.REFUSED`).
    """
    try:
        yield
    except OperationRefusedError as exc:
        words = rule(exc) or _shared_rule(exc)
        raise CommandError(arguments[exc.role], words, ExitCode.REFUSED) from None


def _shared_rule(error: OperationRefusedError) -> str:
    if isinstance(error, MissingCapabilityError):
        return (
            f"this store cannot {error.ability} (its backend does not provide {error.capability})"
        )
    if isinstance(error, FactsForgottenError) and error.retried:
        return (
            "facts of this end user were forgotten or erased while they were being "
            f"{error.doing} (is the store being written to?); run the command again"
        )
    return one_line(str(error))
