"""Helpers shared by the exercises of chapter 7 (one copy each)."""
from __future__ import annotations

from torch import nn
import torch

from ...checks.registry import Call
from .._kit import gen, randint


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


# Check inputs of the decoder step of exercise 2, built as (embed_size, num_hiddens) and called
# with four arguments (exercise 1 was such a step too, before issue 19 made it a transfer).


def _step_param_shapes_calls(seed):
    """The parameter-shapes check: one call, embed_size 3 and num_hiddens 5, no state dict."""
    g = gen(seed)
    return [Call(init_args=(3, 5), init_seed=seed, args=_step_inputs(g, 2, 4, 3, 5, torch.tensor([4, 2])),
                 report=("param_shapes",))]


def _step_call(g, state_of, batch, num_steps, embed_size, num_hiddens, lens, init_seed=0, **extra):
    """One call of a decoder step with given parameters: the exercise's
    ``state_of(g, embed_size, num_hiddens)`` draws them from ``g``, then the inputs are drawn."""
    return Call(init_args=(embed_size, num_hiddens), init_seed=init_seed,
                state_dict=state_of(g, embed_size, num_hiddens),
                args=_step_inputs(g, batch, num_steps, embed_size, num_hiddens, lens), **extra)


def _step_random_call(g, state_of, short, init_seed):
    """Random sizes and valid lengths, sequence ``short`` of length 1, gradients for the three
    tensor inputs (the hidden check of both exercises)."""
    batch, num_steps, embed_size, num_hiddens = (randint(g, 2, 5), randint(g, 3, 8),
                                                 randint(g, 2, 6), randint(g, 2, 7))
    lens = torch.randint(1, num_steps + 1, (batch,), generator=g)
    lens[short] = 1
    return _step_call(g, state_of, batch, num_steps, embed_size, num_hiddens, lens, init_seed=init_seed,
                      grads_of=(0, 1, 2))
