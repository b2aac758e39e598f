"""Hypothesis strategies for JSON values, and JSON text that spells one value many ways."""

from __future__ import annotations

import json
import math
from typing import Any, Callable, List

from hypothesis import strategies as st

INT64 = st.integers(min_value=-(2**63), max_value=2**64 - 1)
FLOATS = st.floats(allow_nan=False, allow_infinity=False)
SCALARS = st.one_of(st.none(), st.booleans(), INT64, FLOATS, st.text(max_size=12))
KEYS = st.text(max_size=6)

json_values = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(KEYS, inner, max_size=4)),
    max_leaves=20,
)


def canonical(value: Any) -> Any:
    """A hashable form equal for exactly the equal JSON values (SPEC §2): member order
    ignored, numbers by value (integers exactly, others as doubles), true is not 1."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return (type(value).__name__, value)
    if isinstance(value, int):
        return ("n", value) if -(2**63) <= value < 2**64 else ("n", float(value))
    if isinstance(value, float):
        if value.is_integer() and -(2**63) <= value < 2**64:
            return ("n", int(value))
        return ("n", value)
    if isinstance(value, list):
        return ("a", tuple(canonical(v) for v in value))
    return ("o", frozenset((k, canonical(v)) for k, v in value.items()))


def spellings(draw: Callable[[Any], Any], value: Any) -> str:
    """JSON text for `value` with member order shuffled and numbers spelled at random
    (`3`, `3.0`, `3e0`, `30e-1`; floats by repr or 17 significant digits)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, int):
        forms = [str(value)]
        if abs(value) <= 2**53:
            forms += [f"{value}.0", f"{value}e0", f"{value}.000E+0"]
            if value != 0:  # `00e-1` is not JSON: no leading zeros
                forms.append(f"{value}0e-1")
        return draw(st.sampled_from(forms))
    if isinstance(value, float):
        forms = [repr(value), f"{value:.17g}"]
        if value.is_integer() and abs(value) <= 2**53:
            forms.append(str(int(value)))
        text = draw(st.sampled_from(forms))
        return text if math.isfinite(float(text)) else repr(value)
    if isinstance(value, list):
        return "[" + ",".join(spellings(draw, v) for v in value) + "]"
    keys: List[str] = draw(st.permutations(list(value)))
    return "{" + ",".join(f"{json.dumps(k)}:{spellings(draw, value[k])}" for k in keys) + "}"
