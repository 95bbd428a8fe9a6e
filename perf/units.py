"""Sizes and link rates as the perf scripts take them on their command lines."""

SIZE_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
# tc's notation: bits per second, with decimal multiples
RATE_UNITS = {"kbit": 125, "mbit": 125000, "gbit": 125000000}


def parse_size(text):
    """Bytes of N, NK, NM or NG (binary multiples; KiB, KB and a trailing B are taken too).

    Raises ValueError when text is no size."""
    t = text.strip().upper()
    t = t[:-1] if t.endswith("B") else t
    t = t[:-1] if t.endswith("I") else t
    value = int(t[:-1]) * SIZE_UNITS[t[-1]] if t[-1:] in SIZE_UNITS else int(t)
    if value < 0:
        raise ValueError(f"negative size '{text}'")
    return value


def rate_bytes(text):
    """Bytes per second of Nkbit, Nmbit or Ngbit. Raises ValueError when text is no rate."""
    for unit, factor in RATE_UNITS.items():
        if text.endswith(unit) and text[:-len(unit)].isdigit():
            return int(text[:-len(unit)]) * factor
    raise ValueError(f"rate '{text}' is not N[kmg]bit")
