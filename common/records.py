"""Records as JSON and how saved settings differ from live ones: what run directories and benchmark records share.

    write_json(path, value)                       # written whole or not at all
    read_json(path, "the run's settings")         # a file that does not parse names itself and what it should hold
    as_json(config)                               # a value as it reads back from JSON (dataclasses as dicts)
    settings_differences(saved, settings)         # {dotted name: (saved, now)}; a field added later at its default
                                                  # is no difference
    describe_differences(differences)             # one line per difference, for an error message
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in _flatten(sub, f"{prefix}{key}.").items()}
    return {prefix[:-1]: tree}


def as_json(value: Any) -> Any:
    """``value`` as it reads back from JSON (dataclasses become dicts, tuples lists; other objects their ``str``)."""
    return json.loads(json.dumps(value, default=_json_default))


def _json_default(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    return str(value)


def default_valued_fields(tree: Any, prefix: str = "") -> set[str]:
    """Dotted names of the dataclass fields in ``tree`` (dicts and dataclasses, nested) that hold their default: the
    value a run saved before the field existed is taken to have had (a field is added with a default that keeps the
    old behaviour; see CHANGELOG.md for the one break of that rule)."""
    if isinstance(tree, dict):
        return {k for key, sub in tree.items() for k in default_valued_fields(sub, f"{prefix}{key}.")}
    if not dataclasses.is_dataclass(tree) or isinstance(tree, type):
        return set()
    found = set()
    for f in dataclasses.fields(tree):
        value, name = getattr(tree, f.name), f"{prefix}{f.name}"
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        try:
            if default is not dataclasses.MISSING and bool(value == default):
                found |= set(_flatten(as_json({name: value})))  # a default dataclass: all its leaves
        except (TypeError, ValueError):  # values without a plain truth value (arrays): not a default
            pass
        found |= default_valued_fields(value, f"{name}.")
    return found


def settings_differences(saved: dict, settings: Any, ignore: tuple[str, ...] = ()) -> dict[str, tuple[Any, Any]]:
    """The dotted names where ``saved`` (settings as read back from JSON) and ``settings`` (live: dicts and config
    dataclasses, nested) differ, as ``{name: (saved, now)}``; names under ``ignore`` are skipped. A config field
    that ``saved`` lacks and that now holds its default is no difference: a field added to the library later, whose
    default keeps the old behaviour (as resuming a run directory allows)."""
    return flat_differences(saved, as_json(settings), set(ignore), default_valued_fields(settings))


def flat_differences(saved: dict, settings: dict, ignore: set[str], defaults: set[str]) -> dict[str, tuple[Any, Any]]:
    """:func:`settings_differences` of ``settings`` already as JSON, with its default-valued field names
    (:func:`default_valued_fields`) given: names missing from ``saved`` that are in ``defaults`` are no difference."""
    old, new = _flatten(saved), _flatten(settings)
    return {k: (old.get(k), new.get(k)) for k in sorted(old.keys() | new.keys())
            if old.get(k) != new.get(k) and not any(k == r or k.startswith(r + ".") for r in ignore)
            and not (k not in old and k in defaults)}


def describe_differences(differences: dict[str, tuple[Any, Any]], most: int = 20) -> str:
    """One line per difference (at most ``most``): ``name: saved ..., now ...``."""
    lines = [f"  {k}: saved {old!r}, now {new!r}" for k, (old, new) in list(differences.items())[:most]]
    if len(differences) > most:
        lines.append(f"  ... and {len(differences) - most} more")
    return "\n".join(lines)


def write_json(path: str | Path, value: Any) -> None:
    """``value`` as indented JSON at ``path``, written whole or not at all (a temporary file, then renamed)."""
    path = Path(path)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(value, indent=1))
    os.replace(temporary, path)


def read_json(path: str | Path, what: str) -> Any:
    """The JSON at ``path``; a file that does not parse raises ``ValueError`` naming it and ``what`` it should be."""
    try:
        return json.loads(Path(path).read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON ({error}); it should hold {what}. Remove it to redo that "
                         "work") from None
