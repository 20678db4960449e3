"""Errors that are the user's to fix, and how the ``embodied-gym`` command tells them from bugs.

A user error is an exception this package raised on purpose, with a message that names the file, key
or value and the fix:

- a :class:`UserInputError` anywhere (validation code raises it; it subclasses ``ValueError``, so
  ``except ValueError`` and existing callers keep working), or
- one of the built-in input errors (``ValueError``, ``TypeError``, ``KeyError``, ``FileNotFoundError``,
  ``FileExistsError``, ``IsADirectoryError``, ``NotADirectoryError``) raised by a ``raise`` statement
  in the ``embodied_gym`` package itself.

The command line prints such an error as one line, ``embodied-gym <command>: error: <message>``, and
exits with status 2. Anything else (an exception from inside a library, or from an operation that
failed in our code, such as a missing dict key) is a bug and keeps its full traceback.
"""

from __future__ import annotations

import linecache
import os


class UserInputError(ValueError):
    """A bad argument, file, dataset or setting; the message names it and says how to fix it."""


_INPUT_ERRORS = (
    ValueError,
    TypeError,
    KeyError,
    FileNotFoundError,
    FileExistsError,
    IsADirectoryError,
    NotADirectoryError,
)
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def is_user_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a user error in the sense of this module's docstring."""
    if isinstance(exc, UserInputError):
        return True
    if not isinstance(exc, _INPUT_ERRORS) or exc.__traceback__ is None:
        return False
    tb = exc.__traceback__
    while tb.tb_next is not None:  # the frame the exception was raised in
        tb = tb.tb_next
    filename = os.path.abspath(tb.tb_frame.f_code.co_filename)
    if not filename.startswith(_PACKAGE_DIR):
        return False
    line = linecache.getline(filename, tb.tb_lineno).strip()
    return line.startswith("raise ") and line != "raise"


def user_message(exc: BaseException) -> str:
    """The error's message without the quotes ``str(KeyError(...))`` adds."""
    if isinstance(exc, KeyError) and len(exc.args) == 1 and isinstance(exc.args[0], str):
        return exc.args[0]
    return str(exc) or type(exc).__name__
