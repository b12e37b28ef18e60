"""Plots used across the chapters: heatmaps of attention weights above all."""
from __future__ import annotations

from typing import Optional, Sequence

import matplotlib.pyplot as plt
import torch


def annotation_colour(image, value: float) -> str:
    """Black or white, whichever contrasts more with the cell's colour (WCAG's relative
    luminance): black numbers on the darkest cells of a heatmap could not be read."""
    red, green, blue, _ = image.cmap(image.norm(value))

    def linear(channel):
        return channel / 12.92 if channel <= 0.03928 else ((channel + 0.055) / 1.055) ** 2.4

    luminance = 0.2126 * linear(red) + 0.7152 * linear(green) + 0.0722 * linear(blue)
    # Contrast with black is (L + 0.05) / 0.05, with white 1.05 / (L + 0.05): equal at L = 0.179.
    return "black" if luminance > 0.179 else "white"


def show_heatmaps(matrices, xlabel: str = "Keys", ylabel: str = "Queries",
                  titles: Optional[Sequence[str]] = None, figsize=(3.0, 3.0),
                  cmap: str = "Reds", xticklabels=None, yticklabels=None,
                  annotate: bool = False, vmin: Optional[float] = 0.0, vmax: Optional[float] = None):
    """Draw one heatmap per matrix in a grid and return the figure.

    ``matrices`` has shape ``(num_rows, num_cols, num_queries, num_keys)``, or
    ``(num_queries, num_keys)`` for a single heatmap, or ``(n, num_queries, num_keys)``
    for one row of ``n`` heatmaps. Attention weights lie in [0, 1], so the colour
    scale starts at 0 unless ``vmin`` says otherwise.
    """
    matrices = torch.as_tensor(matrices).detach().cpu().float()
    if matrices.dim() == 2:
        matrices = matrices[None, None]
    elif matrices.dim() == 3:
        matrices = matrices[None]
    if matrices.dim() != 4:
        raise ValueError(
            f"show_heatmaps: matrices must have 2, 3 or 4 dimensions, got shape {tuple(matrices.shape)}")
    num_rows, num_cols = matrices.shape[:2]
    # One colour scale for every panel: the single colour bar must be true for all of them.
    if vmax is None:
        vmax = float(matrices.max())
    if vmin is None:
        vmin = float(matrices.min())
    fig, axes = plt.subplots(num_rows, num_cols, squeeze=False, sharex=True, sharey=True,
                             figsize=(figsize[0] * num_cols, figsize[1] * num_rows))
    image = None
    for i in range(num_rows):
        for j in range(num_cols):
            ax = axes[i, j]
            matrix = matrices[i, j]
            image = ax.imshow(matrix.numpy(), cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
            if annotate:
                for (r, c), value in zip(torch.cartesian_prod(torch.arange(matrix.shape[0]),
                                                              torch.arange(matrix.shape[1])).tolist(),
                                         matrix.flatten().tolist()):
                    ax.text(c, r, f"{value:.2f}", ha="center", va="center", fontsize=8,
                            color=annotation_colour(image, value))
            if i == num_rows - 1:
                ax.set_xlabel(xlabel)
            if j == 0:
                ax.set_ylabel(ylabel)
            if titles is not None:
                ax.set_title(titles[j] if num_rows == 1 else titles[i * num_cols + j])
            if xticklabels is not None:
                ax.set_xticks(range(len(xticklabels)), list(xticklabels), rotation=90)
            if yticklabels is not None:
                ax.set_yticks(range(len(yticklabels)), list(yticklabels))
    fig.colorbar(image, ax=axes, shrink=0.6)
    return fig


def plot_curves(xs, curves: dict, xlabel: str = "", ylabel: str = "", title: str = "",
                figsize=(5.0, 3.2), logx: bool = False, logy: bool = False, styles: Optional[dict] = None):
    """Plot named curves ``{label: ys}`` against ``xs`` on one axes; return the figure."""
    fig, ax = plt.subplots(figsize=figsize)
    for name, ys in curves.items():
        ys = torch.as_tensor(ys).detach().cpu()
        x = torch.as_tensor(xs).detach().cpu() if xs is not None else torch.arange(len(ys))
        ax.plot(x.numpy(), ys.numpy(), (styles or {}).get(name, "-"), label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    if len(curves) > 1:
        ax.legend()
    fig.tight_layout()
    return fig
