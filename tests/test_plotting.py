"""Heatmaps a reader can read: each annotation in the colour that contrasts with its cell."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402

from attention_course.plotting import show_heatmaps  # noqa: E402


def _luminance(rgb) -> float:
    def linear(c):
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (linear(c) for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _contrast(a, b) -> float:
    high, low = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_every_annotation_contrasts_with_its_cell():
    weights = torch.tensor([[0.0, 0.1, 0.3], [0.5, 0.8, 1.0]])
    fig = show_heatmaps(weights, annotate=True)
    ax = fig.axes[0]
    image = ax.images[0]
    colours = {}
    for text in ax.texts:
        value = float(text.get_text())
        cell = image.cmap(image.norm(value))[:3]
        colours[value] = to_rgb(text.get_color())
        # WCAG's 4.5:1 is for text on a plain background; every cell colour here reaches 4.5 with
        # one of black or white, and the chosen one is the better of the two.
        best = max(_contrast(cell, (0, 0, 0)), _contrast(cell, (1, 1, 1)))
        assert _contrast(cell, colours[value]) == best, (value, text.get_color())
    assert colours[0.0] == (0, 0, 0) and colours[1.0] == (1, 1, 1)  # black on light, white on dark
    plt.close(fig)
