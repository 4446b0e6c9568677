"""Typed, frozen configuration loaded from the one documented defaults file.

Guarantees:
- Every key exists once, in ``conf/defaults.toml``, with a comment; nothing in
  the code holds a second default. The type of a key is the type of its default.
- Overlays (``--conf FILE.toml``) and overrides (``--set section.key=value``)
  may only name existing keys and must keep the key's type; anything else is a
  :class:`ConfigError` with a one-line message. A key that was removed or
  renamed names its replacement (:data:`REMOVED`).
- Every value, default or not, meets the rule declared for its key in
  :data:`crawl_udfs.config_rules.RULES` (range, list elements, enum), checked on every
  load and override: a bad value is a one-line :class:`ConfigError` naming the
  key, never a silently changed behaviour (a negative host delay once turned
  politeness off).
- The result is immutable and pickles, so the driver loads it once and ships it
  to Spark tasks.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Iterable, Mapping

from crawl_udfs import config_rules

DEFAULTS_PATH = Path(__file__).resolve().parents[1] / "conf" / "defaults.toml"

# Keys that no longer exist -> the key that now does their job (one table; an
# overlay or --set naming one is refused with the replacement in the message).
REMOVED = {
    "inject.fetch_interval_s": "schedule.default_interval_s",
    "filter.max_url_length": "url.max_length",
    "robots.max_redirects": "fetch.max_redirect_hops",
    "politeness.park_duration_s": "politeness.failure_park_duration_s",
}


class ConfigError(ValueError):
    """A configuration problem, with a message meant for the operator."""


class Section:
    """An immutable mapping of one TOML table, read by attribute: ``conf.fetch.max_body_bytes``."""

    __slots__ = ("_name", "_values")

    def __init__(self, name: str, values: Mapping[str, Any]):
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_values", {k: _freeze(v) for k, v in values.items()})

    def __getattr__(self, key: str) -> Any:
        try:
            return self._values[key]
        except KeyError:
            raise AttributeError(f"no configuration key {self._name}.{key}") from None

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("configuration is frozen")

    def __reduce__(self):
        return (Section, (self._name, dict(self._values)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Section) and self._values == other._values

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._values.items())))

    def __repr__(self) -> str:
        return f"Section({self._name!r}, {self._values!r})"

    def keys(self) -> Iterable[str]:
        return self._values.keys()

    def as_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self._values.items()}


class Config:
    """The whole configuration: one :class:`Section` per TOML table."""

    __slots__ = ("_sections",)

    def __init__(self, sections: Mapping[str, Mapping[str, Any]]):
        object.__setattr__(self, "_sections", {n: Section(n, v) for n, v in sections.items()})

    def __getattr__(self, name: str) -> Section:
        try:
            return self._sections[name]
        except KeyError:
            raise AttributeError(f"no configuration section [{name}]") from None

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("configuration is frozen")

    def __reduce__(self):
        return (Config, ({n: s.as_dict() for n, s in self._sections.items()},))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Config) and self._sections == other._sections

    def __hash__(self) -> int:
        return hash(tuple(sorted((n, hash(s)) for n, s in self._sections.items())))

    def get(self, dotted: str) -> Any:
        section, _, key = dotted.partition(".")
        return getattr(getattr(self, section), key)

    def as_dict(self) -> dict[str, dict[str, Any]]:
        return {n: s.as_dict() for n, s in self._sections.items()}

    def with_overrides(self, *pairs: str, **dotted: Any) -> "Config":
        """A copy with ``"section.key=value"`` strings and/or ``section__key=value`` kwargs applied."""
        data = self.as_dict()
        for pair in pairs:
            key, value = _split_pair(pair)
            _set(data, key, _parse_value(value), source=f"--set {pair}")
        for key, value in dotted.items():
            _set(data, key.replace("__", "."), value, source=key)
        check_relations(data)
        return Config(data)


def _freeze(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def _split_pair(pair: str) -> tuple[str, str]:
    key, sep, value = pair.partition("=")
    if not sep or "." not in key:
        raise ConfigError(f"--set expects section.key=value, got {pair!r}")
    return key.strip(), value.strip()


def _parse_value(text: str) -> Any:
    """Read a value in TOML syntax (1.5, true, [..], "x"); anything else is a bare string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _same_type(default: Any, value: Any) -> bool:
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(default, bool) and isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    return isinstance(value, type(default))


def _set(data: dict, dotted: str, value: Any, source: str) -> None:
    section, _, key = dotted.partition(".")
    if dotted in REMOVED:
        raise ConfigError(f"{dotted} was removed: use {REMOVED[dotted]} (from {source})")
    if section not in data or key not in data[section]:
        raise ConfigError(f"unknown configuration key {dotted!r} (from {source}); see conf/defaults.toml")
    default = data[section][key]
    if isinstance(value, tuple):
        value = list(value)
    if not _same_type(default, value):
        raise ConfigError(
            f"configuration key {dotted} expects {type(default).__name__}, got {value!r} (from {source})"
        )
    if isinstance(default, float):
        value = float(value)
    check_value(dotted, value, source)
    data[section][key] = value


def check_value(dotted: str, value: Any, source: str) -> None:
    """Raise a one-line :class:`ConfigError` naming the key when ``value`` breaks its rule."""
    wrong = config_rules.problem(dotted, value)
    if wrong is not None:
        got = "" if isinstance(value, list) else f", got {value!r}"  # a list's bad element is named
        raise ConfigError(f"configuration key {dotted}: {wrong}{got} (from {source})")


def check_relations(data: Mapping[str, Mapping[str, Any]]) -> None:
    """Raise a :class:`ConfigError` for the first broken rule between two keys."""
    def get(dotted: str) -> Any:
        section, _, key = dotted.partition(".")
        return data[section][key]
    for wrong in config_rules.relation_problems(get):
        raise ConfigError(f"configuration: {wrong}")


def _read_toml(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"configuration file not found: {path}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"configuration file {path} is not valid TOML: {e}") from None


def load(conf_files: Iterable[str | os.PathLike] = (), overrides: Iterable[str] = ()) -> Config:
    """Defaults, then each overlay file in order, then ``section.key=value`` overrides."""
    data = _read_toml(DEFAULTS_PATH)
    for section, table in data.items():
        for key, value in table.items():
            check_value(f"{section}.{key}", value, source=DEFAULTS_PATH.name)
    for path in conf_files:
        overlay = _read_toml(Path(path))
        for section, table in overlay.items():
            if not isinstance(table, dict):
                raise ConfigError(f"{path}: top-level key {section!r} must be a [section]")
            for key, value in table.items():
                _set(data, f"{section}.{key}", value, source=str(path))
    check_relations(data)
    config = Config(data)
    return config.with_overrides(*overrides) if overrides else config


_DEFAULT: Config | None = None


def defaults() -> Config:
    """The defaults file alone, loaded once per process: for tests and tools.

    Library code never calls it: a function that needs a key takes its section
    (or value) from the caller, so ``--conf`` and ``--set`` reach it.
    """
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = load()
    return _DEFAULT
