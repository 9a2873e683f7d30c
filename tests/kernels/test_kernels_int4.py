"""INT4 weights: compressed-tensors pack-quantized layout, quantization, and the W4A16 matmul.

The packing examples are computed by hand from the layout (nibble = q + 8, value j of eight in
bits 4j..4j+3). The Triton kernel runs on CPU under TRITON_INTERPRET=1 (set before importing triton).
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
torch = pytest.importorskip("torch")
pytest.importorskip("numpy")
pytest.importorskip("triton")

from evalgate.kernels import int4  # noqa: E402


def _i32(u: int) -> int:
    """The int32 whose bits are the unsigned 32-bit value u."""
    return u - (1 << 32) if u >= 1 << 31 else u


@pytest.mark.parametrize(
    ("values", "word"),
    [
        ([1, 2, 3, 4, 5, 6, 7, -8], 0x0FEDCBA9),  # nibbles 9,A,B,...,F,0 from the low bits up
        ([0] * 8, 0x88888888),  # zero is stored as 8: the symmetric offset
        ([-8] * 8, 0x00000000),
        ([7] * 8, 0xFFFFFFFF),
        ([-1, 0, 0, 0, 0, 0, 0, 0], 0x88888887),
        ([0, 0, 0, 0, 0, 0, 0, -7], 0x18888888),
    ],
)
def test_pack_bit_layout_hand_examples(values: list[int], word: int) -> None:
    q = torch.tensor([values], dtype=torch.int8)
    packed = int4.pack_int4(q)
    assert packed.dtype == torch.int32 and packed.tolist() == [[_i32(word)]]
    assert torch.equal(int4.unpack_int4(packed, 8), q)


def test_pack_along_dim0_pads_like_zero_points() -> None:
    zp = torch.tensor([[1], [2], [3], [4], [5], [6], [7], [-8], [-1]], dtype=torch.int8)  # N = 9
    packed = int4.pack_int4(zp, dim=0)
    assert packed.shape == (2, 1)
    # the padding nibbles are 0 after the offset, as compressed-tensors pads the unsigned values
    assert packed[0, 0] == _i32(0x0FEDCBA9) and packed[1, 0] == 0x00000007
    assert torch.equal(int4.unpack_int4(packed, 9, dim=0), zp)


def test_pack_round_trip_random_and_rejects_out_of_range() -> None:
    g = torch.Generator().manual_seed(0)
    q = torch.randint(-8, 8, (13, 64), generator=g, dtype=torch.int8)
    assert torch.equal(int4.unpack_int4(int4.pack_int4(q), 64), q)
    with pytest.raises(ValueError, match=r"\[-8, 7\]"):
        int4.pack_int4(torch.tensor([[8] * 8], dtype=torch.int8))


def test_symmetric_qparams_follow_compressed_tensors() -> None:
    w = torch.tensor([[-7.5, 7.5, 0.5, 1.5, 2.5, -0.5, 3.0, 0.0, 0.0, 0.3, -3.75, 1.0, 1.25, 0.75, 2.0, 0.1]])
    scale, zero = int4.int4_qparams(w, group_size=8, symmetric=True)
    assert scale.tolist() == [[1.0, 0.5]]  # amax / 7.5
    assert torch.equal(zero, torch.zeros(1, 2, dtype=torch.int8))
    q = int4.quantize_int4_values(w, scale, zero, 8)
    # -amax -> -8; +amax -> round(7.5) = 8, clamped to 7; ties round to even (0.5 -> 0, 2.5 -> 2)
    assert q[0].tolist() == [-8, 7, 0, 2, 2, 0, 3, 0, 0, 1, -8, 2, 2, 2, 4, 0]


def test_asymmetric_qparams_cover_min_and_max() -> None:
    w = torch.tensor([[0.5, 1.0, 2.0, 3.5, 2.5, 1.5, 0.75, 3.0]])  # all positive: min clamps to 0
    scale, zero = int4.int4_qparams(w, group_size=8, symmetric=False)
    assert torch.allclose(scale, torch.tensor([[3.5 / 15]]))
    assert zero.tolist() == [[-8]]
    wq = int4.quantize_int4(w, group_size=8, symmetric=False)
    assert wq.zero_point is not None and wq.zero_point.shape == (1, 1)
    assert int4.unpack_int4(wq.zero_point, 1, dim=0).tolist() == [[-8]]
    assert (int4.dequantize_int4(wq) - w).abs().max() <= scale.max() / 2 + 1e-7


@pytest.mark.parametrize("symmetric", [True, False])
def test_dequant_error_is_at_most_half_a_step(symmetric: bool) -> None:
    g = torch.Generator().manual_seed(1)
    w = torch.randn(32, 512, generator=g) / 50
    wq = int4.quantize_int4(w, group_size=128, symmetric=symmetric)
    assert wq.packed.shape == (32, 64) and wq.scale.shape == (32, 4)
    err = (int4.dequantize_int4(wq) - w).abs().reshape(32, 4, 128)
    step = wq.scale.unsqueeze(-1)
    # symmetric clamps +amax from 7.5 steps to 7, a full half step more
    assert bool((err <= step * (1.0 if symmetric else 0.5) + 1e-7).all())


def test_group_size_must_divide_k_and_weights_be_finite() -> None:
    with pytest.raises(ValueError, match="group_size=128"):
        int4.quantize_int4(torch.zeros(4, 576))
    with pytest.raises(ValueError, match="finite"):
        int4.quantize_int4(torch.full((1, 128), float("nan")))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize(("m", "n", "k", "group"), [(3, 40, 256, 128), (17, 72, 192, 64)])
def test_triton_w4a16_equals_reference(dtype, symmetric: bool, m: int, n: int, k: int, group: int) -> None:
    g = torch.Generator().manual_seed(m * n)
    x = torch.randn(m, k, generator=g)
    x[:, 5] *= 40  # an activation outlier channel
    x = x.to(dtype)
    w = torch.randn(n, k, generator=g) / 50
    wq = int4.quantize_int4(w, group_size=group, symmetric=symmetric)
    ref = int4.w4a16_matmul_ref(x, wq)
    tri = int4.w4a16_matmul_triton(x, wq, block_n=32)
    assert ref.dtype == tri.dtype == dtype
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}[dtype]
    assert torch.allclose(tri.float(), ref.float(), atol=tol * float(ref.float().abs().max()), rtol=tol)


def test_matmul_reference_equals_dense_product() -> None:
    g = torch.Generator().manual_seed(2)
    x, w = torch.randn(4, 256, generator=g), torch.randn(8, 256, generator=g)
    wq = int4.quantize_int4(w)
    assert torch.allclose(int4.w4a16_matmul_ref(x, wq), x @ int4.dequantize_int4(wq).T)
    with pytest.raises(ValueError, match=r"x must be \[M, 256\]"):
        int4.w4a16_matmul_triton(torch.randn(4, 128), wq)
