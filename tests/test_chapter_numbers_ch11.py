"""The numbers that chapter 11's prose quotes, worked out here and read from the stored outputs.

The prose states counts and sizes that its seeded cells print (nbval keeps those outputs true).
Each test computes the number independently (a formula here, not the notebook's code), checks that
the stored output shows it, and looks for the sentence in the markdown (whitespace ignored), so an
edit of a cell that moves a number fails here until the prose follows.
"""
from pathlib import Path

import notebook_text
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "solutions" / "11_triton_kernel.ipynb"


def _normal(text):
    return notebook_text.normal(text)


@pytest.fixture(scope="module")
def prose():
    return notebook_text.prose(NOTEBOOK)


def _output_of(marker):
    return _normal(notebook_text.output_of(NOTEBOOK, marker))


def _ceil(a, b):
    return -(-a // b)


def test_the_grid_of_the_first_kernel(prose):
    rows, cols = _ceil(10, 4), _ceil(13, 8)
    assert (rows, cols) == (3, 2)
    assert f"grid: ({rows}, {cols})" in _output_of("def who_writes")
    # program 5 (last row, last column) owns rows 8-11 and columns 8-15, of which 2 x 5 are inside
    last_rows, last_cols = 10 - 8, 13 - 8
    assert (last_rows, last_cols) == (2, 5)
    assert "Program 5 owns rows 8 to 11 and columns 8 to 15 but writes only the 2 × 5 entries" in prose
    assert "three padding columns of every row and two rows below the matrix" in prose


def test_the_padding_lanes_of_the_log_sum_exp(prose):
    assert 50 % 16 == 2 and 16 - 50 % 16 == 14
    assert "The last block of each row has 2 real entries and 14 padding lanes" in prose
    assert "padding with 0 agrees: False" in _output_of("pad=0.0")


def test_the_forward_check_has_ragged_blocks(prose):
    assert (_ceil(100, 32), 100 - 3 * 32, _ceil(100, 16), 100 - 6 * 16) == (4, 4, 7, 4)
    assert ("4 query blocks per slice, the last one with only 4 real queries, and 7 key blocks, "
            "the last one with 4 real keys") in prose
    out = _output_of("attention_forward(q, k, v, block_m=32, block_n=16)")
    assert f"programs: {4 * 6} | key blocks per program: 7" in out
    assert "kept for the backward pass per slice: 100 numbers, not 10000" in _output_of("rebuilt = ")


def test_causal_blocks_loaded_and_masked(prose):
    blocks = 128 // 16
    loaded, masked = blocks * (blocks + 1) // 2, blocks
    assert f"blocks loaded: {loaded} of {blocks * blocks} | masked: {masked}" in _output_of("visits=visits)")
    assert f"the programs load {loaded} of the {blocks * blocks} blocks, and only the {masked} on the diagonal" in prose


def test_on_chip_bytes_and_main_memory_traffic(prose):
    def kib(block_m, block_n, d):   # 2-byte Q, K, V blocks; float32 scores, accumulator, m and l
        return ((block_m + 2 * block_n) * d * 2 + block_m * block_n * 4 + block_m * d * 4 + 2 * block_m * 4) / 1024

    table = _output_of("def tile_bytes")
    for sizes, shown in (((64, 64, 64), "56.5"), ((128, 64, 128), "161"), ((256, 128, 128), "386")):
        assert f"{kib(*sizes):g}" == shown and shown in table
    assert 1.5 * 228 < kib(256, 128, 128) < 2 * 228          # "more than one and a half times" 228 KB
    assert "the last is more than one and a half times the shared memory" in prose

    def kv_mib(block_m, n=8192, d=128):
        return (n // block_m) * 2 * n * d * 2 / 2**20

    assert (kv_mib(16), kv_mib(128)) == (2048, 256)
    assert "2048 MiB with blocks of 16 against 256 MiB with blocks of 128" in prose
    assert "16 16 512 262144 2048" in _output_of("kv_mib = ")
