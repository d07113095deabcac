"""One line for every error of the command line: ``gcpo`` and ``python -m gcpo_train``
report an error as one line naming it, exit 2, and show the traceback only with ``--traceback``."""

from __future__ import annotations

import difflib
import sys
from collections.abc import Iterable


def run_one_line(fn, prog: str, traceback: bool) -> int:
    """Run ``fn``; any error is one line on stderr naming it (exit 2), the full traceback only
    with ``--traceback``. Bad input, file-system errors (a full disk), a busy run folder and a
    library's own errors all read the same way."""
    if traceback:
        return fn()
    try:
        return fn()
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - every error is reported, in one line
        print(f"{prog}: error: {one_line(err)} (--traceback for details)", file=sys.stderr)
        return 2


def one_line(err: BaseException) -> str:
    """An exception as one line: our ValueError/OSError texts as they are, others with their type."""
    text = " ".join(str(err).split()) or type(err).__name__
    if isinstance(err, OSError) and err.filename and str(err.filename) not in text:
        text = f"{text}: {err.filename}"
    if not isinstance(err, (ValueError, OSError)):  # a library's error or a bug: say which kind
        text = f"{type(err).__name__}: {text}"
    return text[:2000]


def did_you_mean(word: str, choices: Iterable[str], n: int = 3) -> str:
    """The hint for a misspelt name: ``" (did you mean a, b?)"`` with up to ``n`` close matches
    from ``choices`` (difflib's ratio >= 0.6), or "" when none is close. The one helper behind
    every "did you mean" of the command line, the config keys and modulator_params."""
    choices = list(choices)
    same_letters = [c for c in choices if c.casefold() == str(word).casefold()]  # 'BOT_RD' scores low in difflib
    close = same_letters or difflib.get_close_matches(str(word), choices, n=n)
    return f" (did you mean {', '.join(close)}?)" if close else ""


def not_utf8(path, err: UnicodeDecodeError) -> ValueError:
    """A file that is not UTF-8 text, named with the line and byte of its first bad byte (the
    decoder's own message names neither the file nor the line)."""
    from pathlib import Path

    try:
        data = Path(path).read_bytes()
        data.decode("utf-8")
        where = ""
    except UnicodeDecodeError as found:
        line = data.count(b"\n", 0, found.start) + 1
        where = f" line {line} (byte {found.start}: 0x{data[found.start]:02x})"
    except OSError:
        where = ""
    return ValueError(f"{path}:{where} not UTF-8 text ({err.reason}); save the file as UTF-8")
