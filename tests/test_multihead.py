"""The course's multi-head layers (attention_course.multihead): the wrapper, the
efficient layer and the SDPA-backed layer compute the same function; head
projection sizes are d_out // num_heads (a known reader bug elsewhere); a d_out
not divisible by num_heads is a clear error. Expected values come from an
independent computation written here, not from the code under test."""
import math

import pytest
import torch

from attention_course.multihead import (MultiHeadAttention, MultiHeadAttentionWrapper,
                                        SDPAMultiHeadAttention, copy_wrapper_weights, head_dim_of)


def _by_hand(layer, x):
    # Plain per-head causal attention written from the definition.
    batch, tokens, _ = x.shape
    heads, d_out = layer.num_heads, layer.W_query.weight.shape[0]
    d_head = d_out // heads
    q, k, v = layer.W_query(x), layer.W_key(x), layer.W_value(x)
    outputs = []
    for h in range(heads):
        part = slice(h * d_head, (h + 1) * d_head)
        scores = q[..., part] @ k[..., part].transpose(1, 2) / math.sqrt(d_head)
        future = torch.ones(tokens, tokens, dtype=torch.bool).triu(1)
        weights = scores.masked_fill(future, float("-inf")).softmax(-1)
        outputs.append(weights @ v[..., part])
    return layer.out_proj(torch.cat(outputs, dim=-1))


@pytest.mark.parametrize("num_heads,d_out,tokens", [(1, 4, 3), (2, 6, 5), (4, 8, 7)])
def test_three_layers_agree_with_the_definition(num_heads, d_out, tokens):
    torch.manual_seed(num_heads)
    x = torch.randn(2, tokens, 5)
    wrapper = MultiHeadAttentionWrapper(5, d_out, context_length=8, num_heads=num_heads).eval()
    efficient = copy_wrapper_weights(wrapper, MultiHeadAttention(5, d_out, 8, num_heads=num_heads).eval())
    sdpa = SDPAMultiHeadAttention(5, d_out, 8, num_heads=num_heads).eval()
    sdpa.load_state_dict(efficient.state_dict(), strict=False)
    expected = _by_hand(efficient, x)
    with torch.no_grad():
        for layer in (wrapper, efficient, sdpa):
            torch.testing.assert_close(layer(x), expected, rtol=1e-5, atol=1e-6)


def test_head_projection_sizes():
    layer = MultiHeadAttention(d_in=10, d_out=12, context_length=6, num_heads=3)
    assert tuple(layer.W_query.weight.shape) == (12, 10)
    assert tuple(layer.out_proj.weight.shape) == (12, 12)
    assert head_dim_of(12, 3) == 4
    wrapper = MultiHeadAttentionWrapper(d_in=10, d_out=12, context_length=6, num_heads=3)
    per_head = [p.shape for n, p in wrapper.named_parameters() if n.endswith("W_query.weight")]
    assert per_head == [torch.Size([4, 10])] * 3, per_head


@pytest.mark.parametrize("cls", [MultiHeadAttention, MultiHeadAttentionWrapper, SDPAMultiHeadAttention])
def test_indivisible_d_out_is_a_clear_error(cls):
    with pytest.raises(ValueError) as info:
        cls(d_in=4, d_out=10, context_length=4, num_heads=3)
    message = str(info.value)
    assert "d_out" in message and "num_heads" in message and "10" in message and "3" in message
