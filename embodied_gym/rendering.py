"""Headless OpenGL selection for MuJoCo: EGL first, OSMesa as the fallback.

MuJoCo reads ``MUJOCO_GL`` when it is first imported, so :func:`select_gl_backend` runs in
``embodied_gym/__init__.py`` before anything imports ``mujoco``. A backend the user set
explicitly is always respected.
"""

from __future__ import annotations

import atexit
import ctypes.util
import os
import sys
import weakref

_LIVE_RENDERERS: "weakref.WeakSet" = weakref.WeakSet()
_AT_EXIT: list[bool] = []


def _close_renderers() -> None:
    # A renderer left open until interpreter teardown frees its GL context after the GL
    # libraries are gone, which prints noisy tracebacks; close them while everything still exists.
    # Registered after MuJoCo's own EGL atexit hook (made with the first context), so it runs first.
    for r in list(_LIVE_RENDERERS):
        try:
            r.close()
        except Exception:
            pass


def select_gl_backend() -> str | None:
    """Set ``MUJOCO_GL`` (and PyOpenGL's platform) to a backend whose library is present."""
    if "MUJOCO_GL" in os.environ:
        return os.environ["MUJOCO_GL"]
    if sys.platform != "linux" or os.environ.get("DISPLAY"):
        return None  # macOS/Windows or a desktop: MuJoCo's default (GLFW) works
    for backend, lib in (("egl", "EGL"), ("osmesa", "OSMesa")):
        if ctypes.util.find_library(lib):
            os.environ["MUJOCO_GL"] = backend
            os.environ.setdefault("PYOPENGL_PLATFORM", backend)
            return backend
    return None


_HELP = (
    "MuJoCo could not create an offscreen OpenGL context ({err}). Headless rendering needs EGL "
    "(Debian/Ubuntu: `apt-get install libegl1`) or OSMesa (`apt-get install libosmesa6`), then "
    "MUJOCO_GL=egl or MUJOCO_GL=osmesa. The project's setup script installs them when run as root."
)


def make_renderer(model, height: int, width: int):
    """A ``mujoco.Renderer``, with an error that says what to install when no GL is available."""
    import mujoco

    try:
        renderer = mujoco.Renderer(model, height, width)
        _LIVE_RENDERERS.add(renderer)
        if not _AT_EXIT:
            atexit.register(_close_renderers)
            _AT_EXIT.append(True)
        return renderer
    except Exception as e:  # mujoco raises several types depending on the backend
        raise RuntimeError(_HELP.format(err=f"{type(e).__name__}: {e}; MUJOCO_GL={os.environ.get('MUJOCO_GL')}")) from e
