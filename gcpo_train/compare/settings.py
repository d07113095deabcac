"""The settings of ``gcpo compare``: a comparison config's ``compare:`` mapping (the defaults of
the command's flags of the same names) and the checks shared by the flags and the YAML fields."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from gcpo_train.config import TrainConfig

# the smallest value of each count setting of a comparison (flag or YAML field)
COUNT_FLOORS = {"eval_every": 0, "eval_n": 1, "split_seed": 0}


def check_count(label: str, key: str, value) -> None:
    """An integer (not a bool) >= the key's floor, else a ValueError that names ``label``."""
    low = COUNT_FLOORS[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{label} must be an integer >= {low}, got {value!r}")


# The ``compare:`` mapping of a comparison config (configs/compare/*.yaml): the defaults of the
# command's flags of the same names (a flag given wins).
COMPARE_DEFAULTS = {
    "modulators": ["none", "bot_rd"],
    "seeds": [0, 1, 2],
    "eval_every": 0,
    "eval_n": 200,
    "split_seed": None,
    "bf16_sampling": False,
    "equivalence_margin": 0.1,
}


def load_compare_config(path, overrides: dict | None = None, flags=()) -> tuple[TrainConfig, dict]:
    """A comparison config: TrainConfig fields plus an optional ``compare:`` mapping (arms,
    seeds and evaluation settings, ``COMPARE_DEFAULTS``' keys). Returns (config, settings), the
    settings completed from the defaults; unknown keys and bad values are refused, naming the key
    and the file (``flags``: the settings given as flags, which replace the file's and are checked
    as flags)."""
    from gcpo_analysis.errors import did_you_mean
    from gcpo_train.config import _check_keys, check_given, load_config, read_config_file

    path = Path(path)
    loaded = read_config_file(path)
    section = loaded.pop("compare", None) or {}
    if not isinstance(section, dict):
        raise ValueError(f"{path}: 'compare' must be a mapping of {', '.join(COMPARE_DEFAULTS)}, got {section!r}")
    for key in section:
        if key not in COMPARE_DEFAULTS:
            raise ValueError(
                f"unknown key {key!r} in {path}'s compare: mapping{did_you_mean(key, list(COMPARE_DEFAULTS))}"
            )
    _check_keys(loaded, str(path))
    check_given(loaded, dict.fromkeys(loaded, str(path)))  # the error names the file
    settings = {**COMPARE_DEFAULTS, **section}
    for key in ("modulators", "seeds"):
        value = settings[key]
        if isinstance(value, str):
            settings[key] = comma_items(value, f"{path}: compare.{key}")
        elif not isinstance(value, list):
            raise ValueError(f"{path}: compare.{key} must be a list, got {value!r}")
    if "seeds" not in flags:
        settings["seeds"] = [parse_seed(s, f"{path}: compare.seeds") for s in settings["seeds"]]
    if not isinstance(settings["bf16_sampling"], bool):
        raise ValueError(f"{path}: compare.bf16_sampling must be true or false, got {settings['bf16_sampling']!r}")
    margin = settings["equivalence_margin"]
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 < margin < 1:
        raise ValueError(f"{path}: compare.equivalence_margin must be a number in (0, 1), got {margin!r}")
    if "sampling_kernels" not in loaded and "sampling_kernels" not in (overrides or {}):
        from gcpo_train.compare.plan import fastest_fp32_kernels

        merged = {**loaded, **(overrides or {})}
        loaded["sampling_kernels"] = fastest_fp32_kernels(
            merged.get("model"), merged.get("device"), merged.get("backend")
        )
    for key in COUNT_FLOORS:
        value = settings[key]
        if key not in flags and (value is not None or key == "eval_every"):  # eval_every has no "off" None
            check_count(f"{path}: compare.{key}", key, value)
    config = load_config(None, {**loaded, **(overrides or {})})
    if (
        "modulators" in section and "modulators" not in flags
    ):  # named here, not as a --modulators flag the user never gave
        for arm in settings["modulators"]:
            try:
                dataclasses.replace(config, modulator=arm)
            except ValueError as err:
                raise ValueError(f"{path}: compare.modulators: {err}") from None
    return config, settings


def parse_seed(value, where: str) -> int:
    """An integer seed from 0 to 2^63 - 1 (numpy and torch take seeds as int64), else a
    ValueError naming ``where`` (the flag, or the file and key)."""
    from gcpo_analysis.knob import INT64

    text = str(value).strip()
    # ASCII digits only: str.isdigit also takes superscripts ('²'), which int() refuses
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not (text.isascii() and text.isdigit()):
        raise ValueError(f"{where}: {value!r} is not an integer seed >= 0 (digits 0-9)")
    if int(value) > INT64[1]:
        raise ValueError(f"{where}: seed {int(value)} must fit a 64-bit integer (0 to 2^63 - 1)")
    return int(value)


def comma_items(text: str, where: str) -> list[str]:
    """The stripped items of a comma-separated list (``none,bot_rd``, ``0,1,2``); an empty item
    (``0,,1``, a trailing comma) is refused naming ``where`` (the flag, or the file and key), not skipped."""
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise ValueError(f"{where} {text!r}: an empty item; give comma-separated items such as none,bot_rd or 0,1,2")
    return items


def parse_seeds(text: str, flag: str = "--seeds") -> list[int]:
    """A comma-separated list of seeds (``0,1,2``), each checked by ``parse_seed``, none twice."""
    seeds = [parse_seed(item, flag) for item in comma_items(text, flag)]
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise ValueError(f"{flag} {text!r}: seed {repeated[0]} is given twice (each seed is one independent run)")
    return seeds
