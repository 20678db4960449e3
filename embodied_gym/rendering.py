"""Headless OpenGL selection for MuJoCo: EGL first, OSMesa as the fallback.

MuJoCo reads ``MUJOCO_GL`` when it is first imported, so :func:`select_gl_backend` runs in
``embodied_gym/__init__.py`` before anything imports ``mujoco``. A backend the user set
explicitly is always respected.

Renderers are made lazily, on the first frame a process asks for, so an env that never renders
never touches OpenGL. An OpenGL context does not survive ``fork``: EGL and OSMesa drivers
(Mesa's llvmpipe rasteriser threads, a GPU driver's state) exist only in the process that made
them, and a forked child that renders waits on them forever. A process forked from one that
already rendered (multiprocessing's ``fork`` start method, the default on Linux before Python
3.14, which ``gym.make_vec(..., vectorization_mode="async")`` uses unless told otherwise)
therefore gets :class:`ForkedGLContextError` on its first frame, saying what to pass instead
(``vector_kwargs={"context": "spawn"}``); ``spawn`` and ``forkserver`` workers (SB3's
``SubprocVecEnv`` default) start clean and render normally.

:func:`crop_box` and :func:`crop_frames` cut a region (fractions of the frame) out of rendered
frames, by the one rule the pose estimator and a VisAligner model trained on a crop share.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes.util
import os
import sys
import weakref

_LIVE_RENDERERS: weakref.WeakSet = weakref.WeakSet()
_AT_EXIT: list[bool] = []
_GL_USED: list[bool] = []  # this process made an OpenGL context
_FORKED_AFTER_GL: list[bool] = []  # this process was forked from one that had
_INHERITED: list = []  # the parent's GL objects, kept alive so no destructor calls the driver


class ForkedGLContextError(RuntimeError):
    """Rendering in a process forked after its parent made an OpenGL context (see module docstring)."""


_FORK_HELP = (
    "this process was forked from one that had already rendered with MuJoCo (MUJOCO_GL={gl}); an "
    "OpenGL context does not survive fork, and rendering here would wait forever. Start worker "
    "processes with 'spawn' or 'forkserver' instead: gym.make_vec(..., vectorization_mode=\"async\", "
    'vector_kwargs={{"context": "spawn"}}), gym.vector.AsyncVectorEnv(env_fns, context="spawn"), '
    'SubprocVecEnv(env_fns, start_method="forkserver") (its default), or '
    'multiprocessing.get_context("spawn"). Alternatively create the worker processes before the '
    "first frame is rendered in this one."
)


def _parent_had_gl() -> bool:
    if _GL_USED:
        return True
    egl = sys.modules.get("mujoco.egl")  # a renderer made by someone else (plain mujoco.Renderer)
    return getattr(egl, "EGL_DISPLAY", None) is not None


def _after_fork_in_child() -> None:
    if not _parent_had_gl():
        return
    _FORKED_AFTER_GL.append(True)
    # The parent's renderers were copied into this process; freeing them would call into the dead
    # driver state, so detach their contexts and keep the objects alive without closing them.
    for r in list(_LIVE_RENDERERS):
        ctx = getattr(r, "_gl_context", None)
        _INHERITED.append((ctx, getattr(r, "_mjr_context", None)))
        if ctx is not None and hasattr(ctx, "_context"):
            ctx._context = None
        for attr in ("_gl_context", "_mjr_context"):
            if hasattr(r, attr):
                setattr(r, attr, None)
        r.render = _refuse_inherited_render  # an env copied from the parent keeps its renderer
    _LIVE_RENDERERS.clear()


def _refuse_inherited_render(*args, **kwargs):
    raise ForkedGLContextError(_FORK_HELP.format(gl=os.environ.get("MUJOCO_GL")))


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _close_renderers() -> None:
    # A renderer left open until interpreter teardown frees its GL context after the GL
    # libraries are gone, which prints noisy tracebacks; close them while everything still exists.
    # Registered after MuJoCo's own EGL atexit hook (made with the first context), so it runs first.
    for r in list(_LIVE_RENDERERS):
        with contextlib.suppress(Exception):
            r.close()


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
    """A ``mujoco.Renderer``, with an error that says what to install when no GL is available.

    Raises :class:`ForkedGLContextError` at once, instead of hanging, in a process forked from one
    that had already rendered.
    """
    import mujoco

    if _FORKED_AFTER_GL:
        raise ForkedGLContextError(_FORK_HELP.format(gl=os.environ.get("MUJOCO_GL")))
    try:
        _GL_USED.append(True)
        renderer = mujoco.Renderer(model, height, width)
        _LIVE_RENDERERS.add(renderer)
        if not _AT_EXIT:
            atexit.register(_close_renderers)
            _AT_EXIT.append(True)
        return renderer
    except Exception as e:  # mujoco raises several types depending on the backend
        raise RuntimeError(_HELP.format(err=f"{type(e).__name__}: {e}; MUJOCO_GL={os.environ.get('MUJOCO_GL')}")) from e


def crop_box(frame_shape, crop) -> tuple[int, int, int, int]:
    """Pixel ``(top, left, bottom, right)`` of the region ``crop`` (``(top, left, bottom, right)`` as
    fractions of the frame) in a frame of ``frame_shape`` ``(H, W, ...)``.

    One rule for every part that works on a region of a camera frame (the pose estimator's input,
    VisAligner trained on the table region), so that they cut the same pixels out of the same frame.
    """
    h, w = int(frame_shape[0]), int(frame_shape[1])
    t, l, b, r = (float(v) for v in crop)
    if not (0 <= t < b <= 1 and 0 <= l < r <= 1):
        raise ValueError(
            f"crop must be (top, left, bottom, right) fractions with 0 <= top < bottom <= 1 and "
            f"0 <= left < right <= 1, got {tuple(crop)}"
        )
    return round(t * h), round(l * w), round(b * h), round(r * w)


def crop_frames(frames, crop, *, channels: bool = True):
    """The region ``crop`` (fractions, see :func:`crop_box`) of images ``(..., H, W, C)``, or of masks
    ``(..., H, W)`` with ``channels=False``."""
    import numpy as np

    frames = np.asarray(frames)
    hw = frames.ndim - (3 if channels else 2)
    if hw < 0:
        raise ValueError(
            f"crop_frames: expected (..., H, W{', C' if channels else ''}) arrays, got shape {frames.shape}"
        )
    t, l, b, r = crop_box(frames.shape[hw : hw + 2], crop)
    return np.ascontiguousarray(frames[(slice(None),) * hw + (slice(t, b), slice(l, r))])
