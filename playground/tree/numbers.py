"""The Tree tab's numbers, Qt-free: a branch's probability is a product over its steps, kept as its log10 (no
underflow on long texts), and written short."""

import math


def log10_of(probability) -> float:
    """log10 of a step's probability: -inf for 0, nan where it is not known (None)."""
    if probability is None or probability != probability:
        return math.nan
    return math.log10(probability) if probability > 0 else -math.inf


def probability_text(log10p: float) -> str:
    """A product of probabilities kept as its log10 (no underflow on long texts) -> "0.42", "3.1e-04"."""
    if math.isnan(log10p):
        return "?"
    if log10p == -math.inf:
        return "0"
    if log10p >= -1:  # 0.1 and above: as the rows' own probabilities are written
        return f"{10**log10p:.2f}"
    if log10p > -300:  # within a float: formatted in C
        return f"{10**log10p:.1e}"
    exponent = math.floor(log10p)
    mantissa = 10 ** (log10p - exponent)
    if round(mantissa, 1) >= 10:
        mantissa, exponent = mantissa / 10, exponent + 1
    return f"{mantissa:.1f}e{exponent:+03d}"


def short(probability, digits: int = 2) -> str:
    """0.21, or 2e-05 where fixed digits would show 0.00 (but 0 itself stays 0.00)."""
    if probability is None:
        return "?"
    return f"{probability:.{digits}f}" if probability >= 10**-digits or probability == 0 else f"{probability:.0e}"
