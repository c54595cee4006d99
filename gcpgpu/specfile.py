"""What `gcpgpu cluster` and `gcpgpu job` read alike: -f spec files, durations and KEY=VALUE options.

Every refusal is a UsageProblem of one line that names the option or the file and key as the user
wrote them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from gcpgpu.errors import UsageProblem

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")

# A spec-file key that is not a field: function(value, where, out) puts what it stands for into out.
Alias = Callable[[Any, str, dict[str, Any]], None]
# A field's value as the spec wants it: function(field, value, where, out) -> value.
Convert = Callable[[str, Any, str, dict[str, Any]], Any]


def lowercase_hint(value: Any, ok: Callable[[str], bool]) -> str:
    """'; did you mean 'demo'?' when capitals alone keep `value` from being a valid name, else ''.

    Names in Google Cloud are lowercase: a capital is refused everywhere alike (machine types, cluster
    and job names), never folded silently, and the refusal says which name would do.
    """
    if isinstance(value, str) and value != value.lower() and ok(value.lower()):
        return f"; did you mean {value.lower()!r}?"
    return ""


def parse_duration(value: str | int | float, where: str) -> int:
    """'90m', '2h', '1d', '3600s' or plain seconds -> whole seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    m = _DURATION.match(str(value))
    if not m:
        raise UsageProblem(f"{where} {value!r} is not a duration; write e.g. 90m, 2h, 1d or 3600s")
    return int(float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)])


def parse_pairs(values: Iterable[str] | None, option: str, example: str = "") -> dict[str, str]:
    """Repeated `option KEY=VALUE` values -> {KEY: VALUE}; the last of a repeated KEY wins."""
    out: dict[str, str] = {}
    for pair in values or ():
        key, sep, value = pair.partition("=")
        if not sep:
            hint = f", e.g. {option} {example}" if example else ""
            raise UsageProblem(f"{option} {pair!r} must look like KEY=VALUE{hint}")
        out[key] = value
    return out


def load_spec_file(
    path: str,
    what: str,
    known_fields: Iterable[str],
    aliases: Mapping[str, Alias] | None = None,
    convert: Convert | None = None,
    *,
    listed: Iterable[str] | None = None,
    types: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """-f PATH: a YAML mapping of `what` fields (keys with dashes or underscores) -> {field: value}.

    aliases: keys that stand for other fields' values (e.g. flex_start), handled where they stand.
    convert: checks and converts each field's value, in the file's order (default: kept as written).
    listed: the names an unknown key's message offers (default: the known fields and the aliases).
    types: field -> type hint; each converted value must have its field's type (see check_type).
    """
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise UsageProblem(f"-f {path}: cannot read it ({e.strerror})") from e
    except UnicodeDecodeError as e:
        raise UsageProblem(f"-f {path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start}); "
                           "save it as UTF-8 YAML") from e
    except yaml.YAMLError as e:
        raise UsageProblem(f"-f {path}: not valid YAML ({str(e).splitlines()[0]})") from e
    if not isinstance(data, dict):
        if data is None:
            raise UsageProblem(f"-f {path}: the file is empty; expected a mapping of {what} fields")
        raise UsageProblem(f"-f {path}: expected a mapping of {what} fields, e.g. 'machine_type: a3-highgpu-8g'")
    known = set(known_fields)
    aliases = aliases or {}
    names = set(listed) if listed is not None else known | set(aliases)
    out: dict[str, Any] = {}
    for key, value in data.items():
        k = str(key).replace("-", "_")
        where = f"-f {path}: {key}"
        if k in aliases:
            aliases[k](value, where, out)
            continue
        if k not in known:
            raise UsageProblem(f"-f {path}: unknown field {key!r}; known fields: {', '.join(sorted(names))}")
        out[k] = convert(k, value, where, out) if convert is not None else value
        if types is not None and k in types:
            check_type(out[k], types[k], where)
    return out


_TYPE_WORDS = {str: "a string", int: "a whole number", bool: "true or false", float: "a number"}


def check_type(value: Any, annotation: Any, where: str) -> None:
    """Refuse a spec-file value whose YAML type is not the field's (a list where a string belongs, ...).

    annotation is the field's resolved type hint: str, int, bool, float, list[str], dict[str, str],
    or any of these `| None`.
    """
    import types as pytypes
    import typing

    options = typing.get_args(annotation) if isinstance(annotation, pytypes.UnionType) or \
        typing.get_origin(annotation) is typing.Union else (annotation,)
    if value is None and type(None) in options:
        return
    words = []
    for option in options:
        if option is type(None):
            continue
        origin = typing.get_origin(option)
        if origin is list:
            words.append("a list of strings")
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                return
        elif origin is dict:
            words.append("a mapping of strings to strings")
            if isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, (str, int, float)) and
                                               not isinstance(v, bool) for k, v in value.items()):
                return
        elif option in _TYPE_WORDS:
            words.append(_TYPE_WORDS[option])
            if isinstance(value, option) and (option is bool or not isinstance(value, bool)):
                return
        else:
            return  # a type this check does not know: left to the spec's own validation
    shown = f"a list ({len(value)} items)" if isinstance(value, list) else \
        "a mapping" if isinstance(value, dict) else repr(value)
    raise UsageProblem(f"{where} is {shown}; it must be {' or '.join(words)}")


def refuse_empty_options(ctx: Any) -> None:
    """An option given as '' (or only spaces) is a mistake, never "not given": say which one (exit 2)."""
    for param in ctx.command.params:
        value = ctx.params.get(param.name)
        values = value if isinstance(value, (list, tuple)) else [value]
        if any(isinstance(v, str) and not v.strip() for v in values):
            name = max(param.opts, key=len) if getattr(param, "opts", None) else str(param.name).upper()
            if param.param_type_name == "argument":
                name = str(param.name).upper()
            raise UsageProblem(f"{name} is empty: give a value, or leave {name} out")
