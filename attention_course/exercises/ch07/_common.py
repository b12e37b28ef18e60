"""Helpers shared by the exercises of chapter 7 (one copy each)."""
from __future__ import annotations

from torch import nn
import torch


def _steps_mask(valid_lens, num_steps):
    """True at the valid steps, (batch, num_steps)."""
    return torch.arange(num_steps)[None, :] < valid_lens[:, None]


def _gru_by_hand(cell: nn.GRUCell, x, h):
    """nn.GRUCell's update written out (PyTorch's gate order r, z, n)."""
    gi = x @ cell.weight_ih.T + cell.bias_ih
    gh = h @ cell.weight_hh.T + cell.bias_hh
    i_r, i_z, i_n = gi.chunk(3, dim=-1)
    h_r, h_z, h_n = gh.chunk(3, dim=-1)
    r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
    n = torch.tanh(i_n + r * h_n)
    return (1 - z) * n + z * h


def _gru_state(g, name, input_size, h, scale=0.4):
    return {f"{name}.weight_ih": scale * torch.randn(3 * h, input_size, generator=g),
            f"{name}.weight_hh": scale * torch.randn(3 * h, h, generator=g),
            f"{name}.bias_ih": 0.1 * torch.randn(3 * h, generator=g),
            f"{name}.bias_hh": 0.1 * torch.randn(3 * h, generator=g)}


def _step_inputs(g, batch, num_steps, embed_size, num_hiddens, lens):
    return (torch.randn(batch, num_hiddens, generator=g), torch.randn(batch, embed_size, generator=g),
            torch.randn(batch, num_steps, num_hiddens, generator=g), lens)
