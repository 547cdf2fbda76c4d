"""Errors as the editor shows them: a plain type name and the message.

ComfyUI names a failed node's exception by its module and class; for a class
defined in a custom node pack the module is the pack's folder path (e.g.
``/home/me/ComfyUI/custom_nodes/comfyui-krea2-cachedit.adapters.registry.UnsupportedModelError``).
The adapters keep their own exception classes (callers and tests catch them by
type); where ComfyUI runs the pack's code, ``plain_errors`` re-raises them as
the built-in type they derive from, with the same message, chained to the
original for the log.
"""

from __future__ import annotations

import builtins
import contextlib

PACKAGE = __name__.rsplit(".", 2)[0]  # the pack's package, whatever its folder is called


def is_pack_error(error: BaseException) -> bool:
    module = type(error).__module__ or ""
    return module == PACKAGE or module.startswith(PACKAGE + ".")


def builtin_base(error_type: type) -> type:
    """The first built-in exception type in ``error_type``'s ancestry."""
    return next(t for t in error_type.__mro__ if t.__module__ == builtins.__name__)


def plain(error: BaseException) -> BaseException:
    """``error`` as its built-in base type with the same message, or unchanged when it is no pack error."""
    if not is_pack_error(error):
        return error
    base = builtin_base(type(error))
    try:
        replacement = base(str(error))
    except TypeError:  # a base that needs other arguments: fall back to the most general readable type
        replacement = RuntimeError(str(error))
    replacement.__cause__ = error
    return replacement


@contextlib.contextmanager
def plain_errors():
    """Re-raise the pack's own exception types as built-in ones (see the module docstring)."""
    try:
        yield
    except Exception as error:
        replacement = plain(error)
        if replacement is error:
            raise
        raise replacement from error
