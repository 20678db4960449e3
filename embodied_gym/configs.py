"""Typed settings that are also the command line and the YAML file.

A trainer's settings are one dataclass. Its fields carry their help text (and, where a command
has always spelled it differently, the flag's name) through :func:`setting`; from that one
definition :func:`add_arguments` builds the command's flags, :func:`load_yaml` reads a YAML file of
the same names (nested dataclasses as nested mappings), and :func:`from_args` combines the two:
dataclass defaults, then ``--config FILE``, then the flags given on the command line. Every
setting a YAML file can reach has a flag of the same name (``batch_size`` is ``--batch-size``;
a nested ``act.steps`` is ``--act.steps``), so there is one name and one meaning for each.

This is the shape of CleanRL's ``Args`` dataclass and LeRobot's draccus configs, kept to the
standard library's ``argparse`` so that existing flags (``--image-size H W``, ``--resume``) keep
their spelling.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

_META = "embodied_gym"


def setting(
    default: Any = dataclasses.MISSING,
    *,
    default_factory: Any = dataclasses.MISSING,
    help: str = "",
    flag: str | None = None,
    aliases: tuple[str, ...] = (),
    metavar: str | tuple[str, ...] | None = None,
    choices: tuple | None = None,
    cli: bool = True,
    required: bool = False,
    cache_key: bool = True,
) -> Any:
    """A dataclass field with its command-line spelling.

    Args:
        default / default_factory: as :func:`dataclasses.field`.
        help: the flag's help text (also the setting's documentation).
        flag: the flag's name when it is not ``--<field-name-with-dashes>``.
        aliases: older spellings still accepted (they print nothing different).
        metavar, choices: as ``argparse``.
        cli: False for settings only a program sets (a progress callback, say).
        required: the command line (or ``--config`` file) must give it, although the dataclass has a
            default (None) so that another config can nest this one and fill it in.
        cache_key: False for settings that cannot change a result (how many processes run the same
            episodes, say): the demo's stage cache leaves them out of the stage's key
            (:func:`in_cache_key`), so changing them reuses the finished stage.
    """
    meta = {
        _META: {
            "help": help,
            "flag": flag,
            "aliases": tuple(aliases),
            "metavar": metavar,
            "choices": choices,
            "cli": cli,
            "required": required,
            "cache_key": cache_key,
        }
    }
    kw: dict[str, Any] = {"metadata": meta}
    if default is not dataclasses.MISSING:
        kw["default"] = default
    if default_factory is not dataclasses.MISSING:
        kw["default_factory"] = default_factory
    return dataclasses.field(**kw)


def in_cache_key(f: dataclasses.Field) -> bool:
    """Whether setting ``f`` is part of a cached stage's key (see :func:`setting`'s ``cache_key``)."""
    return f.metadata.get(_META, {}).get("cache_key", True)


def _meta(f: dataclasses.Field) -> dict:
    return f.metadata.get(
        _META,
        {"help": "", "flag": None, "aliases": (), "metavar": None, "choices": None, "cli": True, "required": False},
    )


def _strip_optional(tp) -> tuple[Any, bool]:
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _dest(prefix: str, name: str) -> str:
    return f"{prefix}{name}".replace(".", "__")


def _flag_name(prefix: str, f: dataclasses.Field) -> str:
    m = _meta(f)
    if m["flag"] and not prefix:
        return m["flag"]
    return "--" + prefix + f.name.replace("_", "-")


def _parse_pair_item(text: str) -> list[str]:
    """``a,b`` -> ``["a", "b"]``: one item of a list of pairs on the command line."""
    return [v.strip() for v in text.split(",")]


def _parse_mapping_item(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    import yaml  # here, not at import: `embodied-gym --help` reads no YAML

    return key, yaml.safe_load(value)


def add_arguments(
    parser: argparse.ArgumentParser,
    cls: type,
    prefix: str = "",
    config_file: bool = False,
    skip: frozenset[str] = frozenset(),
    defaults: Any = None,
    defaults_from: str = "",
) -> None:
    """Add a flag for every setting of dataclass ``cls`` (nested dataclasses as ``--name.field``),
    and with ``config_file`` a ``--config FILE`` flag for a YAML file of the same settings.

    Flags default to "not given" (``argparse.SUPPRESS``): :func:`from_args` fills what is missing
    from the YAML file and the dataclass defaults. ``skip``: setting names left off, for a program
    that fills them itself (a plain name at any depth, a dotted one where it stands).

    The help shows each setting's default: the dataclass's, or with ``defaults`` (an instance of
    ``cls``, e.g. a loaded profile) that instance's values, which are what a run without the flag
    gets. Where a setting's help already describes its default and the instance's value differs
    from it, the value is shown as ``(<defaults_from>: value)``.
    """
    if config_file:
        parser.add_argument("--config", help=f"YAML file of {cls.__name__} settings (the flags below override it)")
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        m = _meta(f)
        if not m["cli"] or f.name in skip or f"{prefix}{f.name}" in skip:
            continue
        tp, optional = _strip_optional(hints[f.name])
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            nested = getattr(defaults, f.name, None) if defaults is not None else None
            add_arguments(parser, tp, f"{prefix}{f.name}.", skip=skip, defaults=nested, defaults_from=defaults_from)
            continue
        names = [_flag_name(prefix, f), *(m["aliases"] if not prefix else ())]
        help_text = _with_default(m["help"] or "", f, defaults, defaults_from)
        kw: dict[str, Any] = {
            "dest": _dest(prefix, f.name),
            "default": argparse.SUPPRESS,
            "help": help_text.replace("%", "%%") or None,
        }
        if m["metavar"] is not None:
            kw["metavar"] = m["metavar"]
        origin, args = get_origin(tp), get_args(tp)
        if tp is bool:
            kw["action"] = argparse.BooleanOptionalAction
        elif origin is Literal:
            kw.update(choices=list(args), type=type(args[0]))
        elif origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            kw.update(nargs="+", type=args[0])
        elif origin is tuple:
            kw.update(nargs=len(args), type=args[0])
        elif origin is list and args and get_origin(args[0]) in (list, tuple):
            kw.update(nargs="*", type=_parse_pair_item)  # e.g. comparisons: ``a,b c,d``
        elif origin is list:
            kw.update(nargs="*", type=args[0] if args else str)
        elif origin is dict or tp is dict:
            kw.update(nargs="*", type=_parse_mapping_item, metavar=m["metavar"] or "KEY=VALUE")
        elif tp in (int, float, str):
            kw["type"] = tp
        else:
            raise TypeError(f"{cls.__name__}.{f.name}: no command-line form for type {tp!r}")
        if m["choices"] is not None:
            kw["choices"] = list(m["choices"])
        if "metavar" not in kw and "choices" not in kw and tp is not bool:
            kw["metavar"] = f.name.upper()  # not the dotted dest a nested setting gets
        parser.add_argument(*names, **kw)


def _field_default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _shown(value: Any) -> str:
    """A value as the command line spells it: ``64 80``, ``use_vae=False`` (pairs as ``a,b``)."""
    if isinstance(value, (tuple, list)):
        return " ".join(",".join(map(str, v)) if isinstance(v, (tuple, list)) else str(v) for v in value)
    if isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def _with_default(help_text: str, f: dataclasses.Field, defaults: Any, defaults_from: str) -> str:
    """``help_text`` with the setting's default: the dataclass's (a plain value, not None), or
    ``defaults``' value of the field when an instance is given."""
    if defaults is None:
        value = f.default
        if value in (dataclasses.MISSING, None) or "default" in help_text:
            return help_text
        return f"{help_text} (default {_shown(value)})".strip()
    value = getattr(defaults, f.name)
    if value is None or (isinstance(value, (list, tuple, dict)) and not value):
        return help_text
    if "default" not in help_text:
        return f"{help_text} (default {_shown(value)})".strip()
    if value == _field_default(f):  # the help's own description of the default holds
        return help_text
    return f"{help_text} ({defaults_from or 'default'}: {_shown(value)})".strip()


def merge(obj, values: dict, where: str):
    """Set ``obj``'s fields from a (nested) mapping; unknown keys are errors naming ``where`` and the key."""
    if not isinstance(values, dict):
        raise ValueError(f"{where}: expected a mapping, got {type(values).__name__}")
    fields = {f.name: f for f in dataclasses.fields(obj)}
    for key, value in values.items():
        if key not in fields:
            raise ValueError(f"{where}: unknown setting {key!r}; valid: {sorted(fields)}")
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current) and isinstance(value, dict):
            merge(current, value, f"{where}.{key}")
            continue
        if isinstance(value, list) and (isinstance(current, tuple) or _is_tuple_field(type(obj), key)):
            value = tuple(value)
        setattr(obj, key, value)
    return obj


def _is_tuple_field(cls: type, name: str) -> bool:
    tp, _ = _strip_optional(typing.get_type_hints(cls)[name])
    return get_origin(tp) is tuple


def load_yaml(path: str | Path) -> dict:
    """A YAML settings file as a mapping (errors name the file)."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"settings file {path} does not exist")
    try:
        values = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ValueError(f"settings file {path} is not valid YAML: {e}") from None
    if not isinstance(values, dict):
        raise ValueError(f"settings file {path} must hold a mapping of setting names to values")
    return values


def given(args: argparse.Namespace, cls: type, prefix: str = "") -> dict:
    """The flags given on the command line, as a nested mapping of ``cls``'s settings."""
    hints = typing.get_type_hints(cls)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        tp, _ = _strip_optional(hints[f.name])
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            sub = given(args, tp, f"{prefix}{f.name}.")
            if sub:
                out[f.name] = sub
            continue
        dest = _dest(prefix, f.name)
        if hasattr(args, dest):
            value = getattr(args, dest)
            if get_origin(tp) is dict or tp is dict:
                value = dict(value)
            out[f.name] = value
    return out


def from_args(cls: type, args: argparse.Namespace, config: str | Path | None = None, **fixed):
    """``cls`` from its defaults, then the YAML file ``config`` (if any), then the flags given on
    the command line, then ``fixed`` (settings the command itself decides, e.g. ``progress=True``).

    Raises:
        ValueError: a required setting is missing from all of them, or a key is unknown (the
            message names the file or "command line" and the valid names).
    """
    from_file = load_yaml(config) if config else {}
    flags = given(args, cls)
    required = _required(cls)
    init = {}
    for name in required:
        for source in (fixed, flags, from_file):
            if name in source:
                init[name] = source[name]
                break
    missing = sorted(n for n in required if init.get(n) is None)
    if missing:
        by_name = {f.name: f for f in dataclasses.fields(cls)}
        flag_names = ", ".join(_flag_name("", by_name[n]) for n in missing)
        raise ValueError(f"missing required setting(s) {missing}: pass {flag_names} or set them in --config FILE")
    obj = cls(**init)
    merge(obj, {k: v for k, v in from_file.items() if k not in required}, str(config))
    merge(obj, {k: v for k, v in flags.items() if k not in required}, "command line")
    for k, v in fixed.items():
        setattr(obj, k, v)
    return obj


def require[T](value: T | None, name: str) -> T:
    """The value of the required setting ``name`` (``setting(None, required=True)``, which
    :func:`from_args` fills); ValueError when a config made otherwise left it unset."""
    if value is None:
        raise ValueError(f"missing required setting {name!r}: pass it on the command line or set it in --config FILE")
    return value


def _required(cls: type) -> set[str]:
    return {
        f.name
        for f in dataclasses.fields(cls)
        if (f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING) or _meta(f).get("required")
    }


def to_dict(obj) -> dict:
    """The settings as plain data (YAML/JSON-ready); tuples become lists."""

    def plain(v):
        if isinstance(v, tuple):
            return [plain(x) for x in v]
        if isinstance(v, list):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    return {k: plain(v) for k, v in dataclasses.asdict(obj).items()}


__all__ = ["add_arguments", "from_args", "given", "load_yaml", "merge", "require", "setting", "to_dict"]
