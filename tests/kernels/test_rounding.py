"""e4m3 rounding of the PyTorch reference: to nearest (torch's cast) and toward zero (vLLM's CPU cache).

Toward zero is checked against an oracle that shares no code with it: a search in the sorted table
of all finite e4m3 values, for every one of the 256 codes, the points between neighbours, values
beyond 448, +-inf and NaN. The check's side-by-side rows are checked for shape and for the
factor truncation costs on reconstruction (~2: the same noise as rounding plus half a step of bias).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict

import pytest

torch = pytest.importorskip("torch")

from evalgate.kernels import fp8_kv  # noqa: E402

ONE = torch.tensor(1.0)
CODES = torch.arange(256, dtype=torch.int32).to(torch.uint8)
VALUES = CODES.view(torch.float8_e4m3fn).float()  # code i -> its value (NaN at 0x7F and 0xFF)
FINITE = VALUES[:127]  # codes 0x00..0x7E: 0 to 448, ascending, so index == code


def _bits(q: torch.Tensor) -> torch.Tensor:
    return q.view(torch.uint8).to(torch.int32)


def _toward_zero_oracle(y: torch.Tensor) -> torch.Tensor:
    """Code of the e4m3 value of largest magnitude <= |y|, with y's sign bit; 448 beyond; NaN kept."""
    mag = y.abs().clamp(max=448.0)
    code = torch.searchsorted(FINITE, mag.nan_to_num(0.0), right=True).to(torch.int32) - 1
    code = torch.where(torch.isnan(y), torch.full_like(code, 0x7F), code)
    return code | (torch.signbit(y).to(torch.int32) << 7)


def _inputs() -> torch.Tensor:
    """All 256 code values, the midpoint and one fp32 ulp either side of every value and midpoint,
    values beyond 448, +-inf, +-NaN and random magnitudes over the whole range; both signs."""
    v = FINITE
    mids = (v[1:] + v[:-1]) / 2
    near = torch.cat([v, mids])
    up = torch.nextafter(near, torch.full_like(near, math.inf))
    down = torch.nextafter(near, torch.zeros_like(near))
    g = torch.Generator().manual_seed(0)
    rand = torch.exp2(torch.empty(4000).uniform_(-14, 9.2, generator=g))
    beyond = torch.tensor([448.0001, 464.0, 479.9, 480.0, 1e30, math.inf, 1e-30, 2.0**-10])
    pos = torch.cat([near, up, down, rand, beyond])
    return torch.cat([VALUES, pos, -pos, torch.tensor([math.nan, -math.nan])])


def test_every_code_is_kept_by_both_roundings() -> None:
    """Each of the 256 codes' own value quantizes to that code (NaN keeps its sign; -0 stays -0)."""
    for rounding in fp8_kv.ROUNDINGS:
        got = _bits(fp8_kv.quantize_fp8(VALUES, ONE, rounding=rounding))
        assert torch.equal(got, CODES.to(torch.int32)), rounding


def test_toward_zero_is_the_largest_magnitude_not_above() -> None:
    x = _inputs()
    got = _bits(fp8_kv.quantize_fp8(x, ONE, rounding="toward_zero"))
    want = _toward_zero_oracle(x)
    bad = (got != want).nonzero().flatten()
    assert bad.numel() == 0, f"{bad.numel()} mismatches, e.g. {x[bad[:5]].tolist()}"
    deq = fp8_kv.dequantize_fp8(fp8_kv.quantize_fp8(x, ONE, rounding="toward_zero"), ONE)
    finite = torch.isfinite(x)
    assert bool((deq[finite].abs() <= x[finite].abs()).all())


def test_toward_zero_known_answers() -> None:
    x = torch.tensor([1.1, -1.1, 1.999, 125.4, 447.99, 448.0, 500.0, -math.inf, 0.001, -0.001, 2.0**-9])
    got = fp8_kv.quantize_fp8(x, ONE, rounding="toward_zero").float()
    assert got.tolist() == [1.0, -1.0, 1.875, 120.0, 416.0, 448.0, 448.0, -448.0, 0.0, -0.0, 2.0**-9]
    assert torch.signbit(got[9])  # -0.001 truncates to -0, not +0
    nan = fp8_kv.quantize_fp8(torch.tensor([math.nan, -math.nan]), ONE, rounding="toward_zero")
    assert _bits(nan).tolist() == [0x7F, 0xFF]


def test_nearest_is_torchs_cast_and_the_default() -> None:
    x = _inputs()
    want = _bits(x.clamp(-448.0, 448.0).to(torch.float8_e4m3fn))
    assert torch.equal(_bits(fp8_kv.quantize_fp8(x, ONE, rounding="nearest")), want)
    assert torch.equal(_bits(fp8_kv.quantize_fp8(x, ONE)), want)


def test_toward_zero_divides_by_the_scale_first() -> None:
    """Per-row scales: the rounding applies to x / scale (powers of two keep the division exact)."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn((4, 3, 64), generator=g) * 30
    scale = torch.exp2(torch.randint(-3, 4, (4, 3), generator=g).float())
    got = _bits(fp8_kv.quantize_fp8(x, scale, rounding="toward_zero"))
    assert torch.equal(got, _toward_zero_oracle(x / scale.unsqueeze(-1)))
    per_tensor = _bits(fp8_kv.quantize_fp8(x, torch.tensor(0.25), rounding="toward_zero"))
    assert torch.equal(per_tensor, _toward_zero_oracle(x / 0.25))


def test_toward_zero_differs_from_nearest_on_about_half_of_random_values() -> None:
    """Issue #45 counted 920-986 of 2,048 cache values where the two differ on vLLM's CPU backend."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2048, generator=g).bfloat16().float()
    scale = fp8_kv.kv_scale(x, granularity="tensor")
    near = _bits(fp8_kv.quantize_fp8(x, scale))
    zero = _bits(fp8_kv.quantize_fp8(x, scale, rounding="toward_zero"))
    assert 850 <= int((near != zero).sum()) <= 1150


def test_unknown_rounding_is_refused() -> None:
    with pytest.raises(ValueError, match="nearest, toward_zero"):
        fp8_kv.quantize_fp8(torch.ones(4), ONE, rounding="truncate")  # type: ignore[arg-type]


def test_check_sets_the_roundings_side_by_side() -> None:
    """Reconstruction: ~x1.9 (truncation's noise is rounding's plus a bias of half a step); decode
    on normal K/V: x2.2-x2.9 over seeds 0-19 (kernels/README.md). Not gated."""
    from evalgate.kernels._cases import Ctx
    from evalgate.kernels._roundings import format_roundings, rounding_rows
    from evalgate.kernels.check import _jsonable

    rows = rounding_rows(Ctx(device=torch.device("cpu"), seed=0, full=False, fault=None))
    assert [(r.name, r.data) for r in rows] == [
        ("fp8_kv.quant", "normal"),
        ("fp8_kv.decode", "normal"),
        ("fp8_kv.quant", "outliers"),
        ("fp8_kv.decode", "outliers"),
    ]
    for r in rows:
        assert set(r.metrics) == set(fp8_kv.ROUNDINGS)
        assert r.ratio == pytest.approx(r.metrics["toward_zero"]["rel_fro"] / r.metrics["nearest"]["rel_fro"])
        if r.name == "fp8_kv.quant":
            assert 1.8 <= r.ratio <= 2.1
            assert 31.0 <= r.metrics["nearest"]["sqnr_db"] <= 32.0  # e4m3's ~31.5 dB floor
    assert 2.0 <= rows[1].ratio <= 3.2
    text = "\n".join(format_roundings(rows))
    assert "toward_zero rel_fro" in text and "quant x1.9" in text
    json.dumps(_jsonable([asdict(r) for r in rows]))
