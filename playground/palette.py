"""The colour scales the window paints numbers with (token backgrounds, the lens grid, the head map), Qt-free.

A value in [0, 1] (0: unlikely, unsure; 1: likely, sure) becomes an (r, g, b) byte triple. The default,
cividis, runs dark blue to yellow: its lightness grows steadily, so it reads the same to a person with
deuteranopia or protanopia and in grey. "red to green" is the older scale, still selectable; it fails the
commonest colour blindness (its two ends differ in hue, hardly in lightness)."""

import colorsys

# cividis (Nuñez, Anderton & Renslow 2018; matplotlib's table) sampled at 9 even steps, linearly interpolated
CIVIDIS = ((0, 32, 77), (5, 54, 110), (64, 77, 107), (96, 100, 111), (124, 123, 120), (155, 148, 119),
           (188, 175, 111), (224, 203, 93), (255, 234, 70))  # fmt: skip
PALETTES = ("cividis", "red to green")
DEFAULT_PALETTE = PALETTES[0]


def _cividis(value: float) -> tuple[int, int, int]:
    where = value * (len(CIVIDIS) - 1)
    low = min(int(where), len(CIVIDIS) - 2)
    part = where - low
    return tuple(round(a + (b - a) * part) for a, b in zip(CIVIDIS[low], CIVIDIS[low + 1]))


def _red_to_green(value: float) -> tuple[int, int, int]:
    """Red through yellow to green (hue 0 to 120 degrees), the window's scale before cividis."""
    return tuple(round(255 * c) for c in colorsys.hsv_to_rgb(value / 3.0, 0.75, 0.95))


def colour(value: float, palette: str = DEFAULT_PALETTE) -> tuple[int, int, int]:
    """The palette's (r, g, b) for value (clamped to [0, 1]; NaN counts as 0)."""
    if palette not in PALETTES:
        raise ValueError(f"unknown palette {palette!r}: choose one of {', '.join(PALETTES)}")
    value = 0.0 if value != value else max(0.0, min(1.0, float(value)))
    return _cividis(value) if palette == "cividis" else _red_to_green(value)


def table(palette: str = DEFAULT_PALETTE, size: int = 256) -> list[tuple[int, int, int]]:
    """size colours evenly from 0 to 1: a lookup table for an image."""
    return [colour(i / (size - 1), palette) for i in range(size)]
