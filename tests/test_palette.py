"""The colour scales (playground/palette.py), without a window."""

import math

import pytest

from playground.palette import CIVIDIS, DEFAULT_PALETTE, PALETTES, colour, table


def lightness(rgb) -> float:
    """Relative luminance (sRGB, WCAG): what a person sees as light or dark, whatever their colour vision."""
    linear = [(c / 255) / 12.92 if c <= 10 else ((c / 255 + 0.055) / 1.055) ** 2.4 for c in rgb]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def test_cividis_is_the_default_and_its_ends_are_dark_blue_and_yellow():
    assert DEFAULT_PALETTE == "cividis" and PALETTES == ("cividis", "red to green")
    assert colour(0.0) == (0, 32, 77) == CIVIDIS[0]
    assert colour(1.0) == (255, 234, 70) == CIVIDIS[-1]
    assert colour(0.5) == CIVIDIS[4]


def test_cividis_grows_lighter_all_the_way_so_it_reads_without_hue():
    levels = [lightness(rgb) for rgb in table("cividis", 101)]
    assert all(b > a for a, b in zip(levels, levels[1:]))
    assert levels[-1] / levels[0] > 20  # the ends are far apart in lightness alone


def test_the_old_red_to_green_scale_is_still_there():
    assert colour(0.0, "red to green") == (242, 61, 61)  # hue 0: red
    assert colour(1.0, "red to green") == (61, 242, 61)  # hue 120: green
    red, green = lightness(colour(0.0, "red to green")), lightness(colour(1.0, "red to green"))
    assert green / red < 5  # its ends differ in hue far more than in lightness: what deuteranopia loses


@pytest.mark.parametrize("value, expected", [(-3.0, 0.0), (7.0, 1.0), (math.nan, 0.0)])
def test_values_outside_0_1_are_clamped(value, expected):
    assert colour(value) == colour(expected)


def test_an_unknown_palette_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="unknown palette 'purple': choose one of cividis, red to green"):
        colour(0.5, "purple")
