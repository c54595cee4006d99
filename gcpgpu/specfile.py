"""What `gcpgpu cluster` and `gcpgpu job` read alike: -f spec files and KEY=VALUE options (durations: times.py).

Every refusal is a UsageProblem of one line that names the option or the file and key as the user
wrote them.
"""

from __future__ import annotations

import difflib
import os
import re
import stat
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from gcpgpu.errors import UsageProblem

# Bounds on what a spec file or a flag may hold. A real spec is a few hundred bytes; these keep a
# hostile or mistaken input (an alias bomb, /dev/zero, a 200 MB value) from costing more than a
# fraction of a second and a few MB before it is refused, and keep every error line short.
MAX_SPEC_BYTES = 256 * 1024
MAX_VALUE_CHARS = 4096  # any one string: a flag's value, a spec value, a trainer argument
MAX_ITEMS = 1000  # entries of one list or mapping in a spec file
MAX_NODES = 5000  # values (scalars, lists, mappings) in a whole spec file
MAX_DEPTH = 8  # nesting of YAML collections (a spec needs 2: a mapping of lists or mappings)
SHOWN_CHARS = 80  # how much of a refused value an error line quotes

# A Google service account's e-mail: ACCOUNT@PROJECT.iam.gserviceaccount.com, and Google's own
# (PROJECT_NUMBER-compute@developer.gserviceaccount.com, PROJECT@appspot.gserviceaccount.com, ...).
_DNS_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
SERVICE_ACCOUNT = re.compile(rf"^{_DNS_LABEL}@(?:{_DNS_LABEL}\.)+gserviceaccount\.com$")

# A spec-file key that is not a field: function(value, where, out) puts what it stands for into out.
Alias = Callable[[Any, str, dict[str, Any]], None]
# A field's value as the spec wants it: function(field, value, where, out) -> value.
Convert = Callable[[str, Any, str, dict[str, Any]], Any]


# A Cloud Storage bucket name (Google's naming rules: 3-63 characters a dot-free name, up to 222 with dots).
BUCKET = re.compile(r"^(?=.{3,222}$)[a-z0-9](?:[a-z0-9_-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9_-]{0,61}[a-z0-9])?)*$")

def lowercase_hint(value: Any, ok: Callable[[str], bool]) -> str:
    """'; did you mean 'demo'?' when capitals alone keep `value` from being a valid name, else ''.

    Names in Google Cloud are lowercase: a capital is refused everywhere alike (machine types, cluster
    and job names), never folded silently, and the refusal says which name would do.
    """
    if isinstance(value, str) and value != value.lower() and ok(value.lower()):
        return f"; did you mean {value.lower()!r}?"
    return ""


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


def shown(value: Any, quote: bool = True) -> str:
    """A value as an error line quotes it: control characters escaped, long values cut short."""
    text = repr(value) if quote or not isinstance(value, str) else repr(value)[1:-1]
    if len(text) > SHOWN_CHARS:
        size = f"{len(value)} characters" if isinstance(value, str) else "long"
        text = f"{text[:SHOWN_CHARS]}... ({size})"
    return text


def read_spec_text(path: str) -> str:
    """A spec file's text: a regular file of at most MAX_SPEC_BYTES, UTF-8 (else one-line UsageProblem).

    The file is opened without blocking and checked with fstat before anything is read, so a FIFO,
    a terminal or /dev/zero is refused at once instead of hanging or reading until memory runs out.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        raise UsageProblem(f"-f {shown(path, quote=False)}: cannot read it ({e.strerror})") from e
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a directory" if stat.S_ISDIR(mode) else "a named pipe" if stat.S_ISFIFO(mode)
                    else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
            raise UsageProblem(f"-f {shown(path, quote=False)}: is {kind}; give a YAML file")
        try:
            raw = f.read(MAX_SPEC_BYTES + 1)
        except OSError as e:
            raise UsageProblem(f"-f {shown(path, quote=False)}: cannot read it ({e.strerror})") from e
    if len(raw) > MAX_SPEC_BYTES:
        raise UsageProblem(f"-f {shown(path, quote=False)}: larger than {MAX_SPEC_BYTES // 1024} KiB; a spec file "
                           "holds a few settings (put data and long configs in files the job reads)")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageProblem(f"-f {shown(path, quote=False)}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at "
                           f"offset {e.start}); save it as UTF-8 YAML") from e


def read_yaml(path: str) -> Any:
    """-f PATH parsed as YAML within the bounds above: no aliases, MAX_DEPTH levels of nesting."""
    import yaml

    text = read_spec_text(path)
    where = f"-f {shown(path, quote=False)}"

    class BoundedLoader(yaml.SafeLoader):
        """SafeLoader that refuses aliases (the only way a few bytes of YAML expand to gigabytes), deep
        nesting (the composer recurses once per level), long collections and too many values, each
        as it is read rather than after the whole file is."""

        depth = 0
        nodes = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            event = self.peek_event()
            self.nodes += 1
            if self.nodes > MAX_NODES:
                raise UsageProblem(f"{where}: line {event.start_mark.line + 1} is past {MAX_NODES} values; a spec "
                                   "file holds a few settings (put data in files the job reads)")
            if isinstance(event, yaml.AliasEvent):
                raise UsageProblem(f"{where}: line {event.start_mark.line + 1} uses the YAML alias "
                                   f"*{shown(event.anchor, quote=False)}; a spec file takes plain values: "
                                   "write the value out where it is used")
            if parent is not None and len(parent.value) >= MAX_ITEMS:
                raise UsageProblem(f"{where}: line {event.start_mark.line + 1} makes a list or mapping of more "
                                   f"than {MAX_ITEMS} entries; a spec file holds a few settings")
            if self.depth >= MAX_DEPTH:
                raise UsageProblem(f"{where}: line {event.start_mark.line + 1} nests lists or mappings more than "
                                   f"{MAX_DEPTH} deep; a spec file is a mapping of values, lists and mappings")
            self.depth += 1
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    loader = BoundedLoader(text)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as e:
        raise UsageProblem(f"{where}: not valid YAML ({shown(str(e).splitlines()[0], quote=False)})") from e
    except ValueError as e:  # a constructor's own limit, e.g. an integer of more than 4300 digits
        raise UsageProblem(f"{where}: a value cannot be read ({shown(str(e).split(';')[0], quote=False)})") from e
    finally:
        loader.dispose()


def check_bounds(value: Any, where: str) -> None:
    """Refuse a spec value longer than MAX_VALUE_CHARS, or a list or mapping of more than MAX_ITEMS entries."""
    if isinstance(value, str):
        if len(value) > MAX_VALUE_CHARS:
            raise UsageProblem(f"{where} is {len(value)} characters long; a value takes at most {MAX_VALUE_CHARS}")
    elif isinstance(value, (list, dict)):
        if len(value) > MAX_ITEMS:
            raise UsageProblem(f"{where} has {len(value)} entries; at most {MAX_ITEMS}")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(value, dict):
                check_bounds(key, f"{where}: a key")
                check_bounds(item, f"{where}.{shown(key, quote=False)}")
            else:
                check_bounds(item, f"{where}[{key}]")


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
    data = read_yaml(path)
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
        check_bounds(key, f"-f {path}: a key")
        where = f"-f {path}: {shown(key, quote=False)}"
        check_bounds(value, where)
        if k in aliases:
            aliases[k](value, where, out)
            continue
        if k not in known:
            # The nearest names when there are some: the whole list grows with every field and
            # would push the one line past what a terminal shows.
            close = difflib.get_close_matches(k, sorted(names), n=3, cutoff=0.6)
            hint = f"did you mean {' or '.join(close)}?" if close else f"known fields: {', '.join(sorted(names))}"
            raise UsageProblem(f"-f {path}: unknown field {shown(key)}; {hint}")
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
    got = f"a list ({len(value)} items)" if isinstance(value, list) else \
        "a mapping" if isinstance(value, dict) else shown(value)
    raise UsageProblem(f"{where} is {got}; it must be {' or '.join(words)}")


def check_option_values(ctx: Any) -> None:
    """Refuse, in one line naming the option (exit 2), a value given as '' (or only spaces: a mistake,
    never "not given"), one longer than MAX_VALUE_CHARS, or one that is not UTF-8 text (bytes the
    shell passed through that no Google API and no instance metadata can carry)."""
    for param in ctx.command.params:
        value = ctx.params.get(param.name)
        values = value if isinstance(value, (list, tuple)) else [value]
        name = max(param.opts, key=len) if getattr(param, "opts", None) else str(param.name).upper()
        if param.param_type_name == "argument":
            name = str(param.name).upper()
        for i, v in enumerate(values):
            if not isinstance(v, str):
                continue
            which = f"{name} (argument {i + 1})" if param.param_type_name == "argument" else name
            if not v.strip():
                raise UsageProblem(f"{name} is empty: give a value, or leave {name} out")
            if len(v) > MAX_VALUE_CHARS:
                raise UsageProblem(f"{which} is {len(v)} characters long; a value takes at most {MAX_VALUE_CHARS}")
            check_utf8(v, which)


def check_service_account(value: str, where: str) -> None:
    """Refuse a value that is not a service account's e-mail address."""
    if len(value) > 254 or not SERVICE_ACCOUNT.match(value):
        raise UsageProblem(f"{where} {shown(value)} must be a service account's e-mail address, like "
                           "trainer@PROJECT.iam.gserviceaccount.com")


def check_utf8(value: str, where: str) -> None:
    """Refuse a string holding bytes that were not UTF-8 (Python keeps them as lone surrogates)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        bad = value[e.start]
        byte = f"byte 0x{ord(bad) - 0xDC00:02x}" if 0xDC80 <= ord(bad) <= 0xDCFF else f"{bad!r}"
        raise UsageProblem(f"{where} {shown(value)} is not UTF-8 text ({byte} at character {e.start + 1}); "
                           "Google's APIs and instance metadata carry UTF-8 only") from None


# Webhook URLs as `--notify` takes them, for a job (jobs/policy.py) and a cluster's autostop
# (cluster/spec.py) alike: one check, one set of one-line refusals.
MAX_NOTIFY = 10
PUBSUB = re.compile(r"^pubsub:projects/[a-z][-a-z0-9]{4,28}[a-z0-9]/topics/[A-Za-z][-\w.~+%]{2,254}$")


def webhook_host(url: str) -> str:
    """scheme://host[:port] of a webhook URL: what a line may print of it. Its user, token, path and query
    stay out (a webhook's path often is its secret)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(a webhook URL)"
    try:
        port = parts.port
    except ValueError:
        port = None
    host = parts.hostname or "?"
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme or '?'}://{host}" + (f":{port}" if port is not None else "")


def check_notify(url: Any, where: str = "--notify") -> str:
    """An http(s) webhook with a host and no user:token@; Pub/Sub topics are refused (the emulator has no
    Pub/Sub to test them on). No refusal prints a user or token."""
    text = str(url)
    if PUBSUB.match(text) or text.startswith("pubsub:"):
        raise UsageProblem(f"{where} {shown(text)}: Pub/Sub topics are not supported yet; give an "
                           "http(s) webhook URL (e.g. https://hooks.example.com/gcpgpu)")
    check_utf8(text, where)
    authority = re.match(r"[A-Za-z][-+.A-Za-z0-9]*://([^/?#]*)", text)
    if authority and "@" in authority.group(1):
        raise UsageProblem(f"{where} {webhook_host(text)}/...: a user or token before the host (user:token@) is "
                           "refused: gcpgpu sends no credentials and keeps the URL in plain text; give the webhook's "
                           "URL without it")
    parts = urlsplit(text) if not any(c.isspace() or ord(c) < 32 for c in text) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageProblem(f"{where} {shown(text)} is not an http(s) URL; give a webhook such as "
                           "https://hooks.example.com/gcpgpu")
    try:
        parts.port  # noqa: B018 - urlsplit checks the port only when asked
    except ValueError:
        raise UsageProblem(f"{where} {shown(text)} has a bad port") from None
    return text


def check_urls(urls: Any, where: str = "--notify") -> list[str]:
    """Every URL checked, at most MAX_NOTIFY of them (a list, or one string from a spec file)."""
    items = [urls] if isinstance(urls, str) else list(urls or [])
    if len(items) > MAX_NOTIFY:
        raise UsageProblem(f"{where} is given {len(items)} times; {MAX_NOTIFY} at most")
    return [check_notify(u, where) for u in items]


def parse_usd(value: Any, where: str) -> float:
    """A dollar amount (job submit --max-spend, cluster up --max-spend, --max-hourly-cost): a positive
    number, '$' allowed ('250', '$99.5'); one line naming `where` otherwise."""
    text = str(value).strip().removeprefix("$").replace(",", "")
    try:
        usd = float(text) if not isinstance(value, bool) and re.fullmatch(r"-?\d+(\.\d+)?", text) else None
    except ValueError:
        usd = None
    if usd is None:
        raise UsageProblem(f"{where} {shown(value)} is not an amount of dollars: give a number such as {where} 250")
    if usd <= 0:
        raise UsageProblem(f"{where} {shown(value)} must be more than $0 (e.g. {where} 250)")
    return usd
