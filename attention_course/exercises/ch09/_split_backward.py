"""Helpers of chapter 9, exercise 6 (the backward pass of one part of split-key attention), kept apart so
that its module stays short.

* ``_validate_block``: the check of ``block`` that the reference, its kept alternatives and its kept
  mistakes share;
* ``_backward_variant``: the reference's tile loop with pluggable switches that most of its kept mistakes
  are built from.
"""
from __future__ import annotations

import math

import torch


def _validate_block(block):
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"block must be a Python int of at least 1, got block={block!r}")


def _backward_variant(probs="merged", row="merged", lse_sign=1.0, lse_times_p=True, scale_of="d",
                      scale_grads=True, validate=True):
    """The reference's tile loop with one change: probs "part" (A's own softmax), "tile", "unshifted"; row
    term D from output_part ("part"), the merge weight's term reversed ("reversed") or one tile ("tile");
    grad_lse times lse_sign or outside P; scale 1/sqrt(d_v); dQ and dK unscaled (scale_grads False), or
    only dK ("q only": dQ alone scaled), or only dQ ("k only"); block unchecked."""
    def impl(queries, keys, values, output_part, lse_part, output, lse, grad_output, grad_lse, block):
        _validate_block(block) if validate else None
        scale = 1.0 / math.sqrt(values.shape[-1] if scale_of == "v" else queries.shape[-1])
        q_scale = 1.0 if scale_grads in (False, "k only") else scale
        k_scale = 1.0 if scale_grads in (False, "q only") else scale
        row_lse = lse_part if probs == "part" else lse
        d_q, d_k, d_v = torch.zeros_like(queries), torch.zeros_like(keys), torch.zeros_like(values)
        for k0 in range(0, keys.shape[-2], block):
            cols = slice(k0, k0 + block)
            kb, vb = keys[..., cols, :], values[..., cols, :]
            for q0 in range(0, queries.shape[-2], block):
                rows = slice(q0, q0 + block)
                qb, dob = queries[..., rows, :], grad_output[..., rows, :]
                s = qb @ kb.transpose(-2, -1) * scale
                if probs == "unshifted":
                    p = torch.exp(s) / torch.exp(lse[..., rows, None])
                elif probs == "tile":
                    p = torch.softmax(s, dim=-1)
                else:
                    p = torch.exp(s - row_lse[..., rows, None])
                d_p = dob @ vb.transpose(-2, -1)
                mine = (dob * output_part[..., rows, :]).sum(dim=-1, keepdim=True)
                merged = (dob * output[..., rows, :]).sum(dim=-1, keepdim=True)
                big_d = {"merged": merged, "part": mine, "reversed": 2 * mine - merged,
                         "tile": (p * d_p).sum(dim=-1, keepdim=True)}[row]
                lse_term = lse_sign * grad_lse[..., rows, None]
                d_s = p * (d_p - big_d + lse_term) if lse_times_p else p * (d_p - big_d) + lse_term
                d_v[..., cols, :] += p.transpose(-2, -1) @ dob
                d_q[..., rows, :] += d_s @ kb * q_scale
                d_k[..., cols, :] += d_s.transpose(-2, -1) @ qb * k_scale
        return d_q, d_k, d_v
    return impl
