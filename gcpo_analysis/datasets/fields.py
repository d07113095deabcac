"""Field access for the dataset parsers: each missing or mistyped field is a ``ValueError`` that
names the record (``where``: "file line N") and the field, and says what was expected."""

from __future__ import annotations


def get_field(rec, key: str, where: str, types=str, optional: bool = False):
    """``rec[key]``, checked to be of ``types`` (None when ``optional`` and absent)."""
    if not isinstance(rec, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    if key not in rec or rec[key] is None:
        if optional:
            return None
        raise ValueError(f"{where}: missing field {key!r}")
    value = rec[key]
    if not isinstance(value, types):
        names = types.__name__ if isinstance(types, type) else "/".join(t.__name__ for t in types)
        raise ValueError(f"{where}: field {key!r} should be {names}, got {type(value).__name__}")
    return value


def str_list(value, where: str, key: str) -> list[str]:
    """A reference or a list of them as a non-empty list of strings (numbers as text)."""
    values = [value] if isinstance(value, (str, int, float)) else value
    if not isinstance(values, list) or not values:
        raise ValueError(f"{where}: field {key!r} should be a non-empty list of strings")
    out = []
    for v in values:
        if isinstance(v, dict) and "text" in v:  # HF narrativeqa answers [{"text": ...}]
            v = v["text"]
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise ValueError(f"{where}: field {key!r} holds a {type(v).__name__}, expected strings")
        out.append(str(v))
    return out


def first_key(rec, keys, where: str) -> str:
    """The first of ``keys`` that ``rec`` holds (the spellings of one field across schemas)."""
    for k in keys:
        if isinstance(rec, dict) and rec.get(k) is not None:
            return k
    raise ValueError(f"{where}: missing field {' / '.join(map(repr, keys))}")
