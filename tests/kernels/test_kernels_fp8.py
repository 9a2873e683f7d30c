"""FP8 e4m3 KV cache: scales, rounding, saturation, NaN, decode attention, and SGLang scale files.

The Triton kernels run on CPU under TRITON_INTERPRET=1 (set below, before triton is imported).
The interpreter's own fp32 -> tl.float8e4nv cast rounds wrongly at binade boundaries (125.4 ->
64), so our quantize kernel rounds explicitly with integer/float32 math and stores the uint8 bit
pattern; these tests compare that pattern bit-for-bit with torch's float8_e4m3fn.
"""

from __future__ import annotations

import json
import math
import os

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
torch = pytest.importorskip("torch")
pytest.importorskip("numpy")  # the Triton interpreter runs on numpy
pytest.importorskip("triton")

from evalgate.kernels import fp8_kv  # noqa: E402
from evalgate.kernels.fp8_kv.sglang_json import sglang_kv_scales_dict  # noqa: E402

ONE = torch.tensor(1.0)


def _bits(q: torch.Tensor) -> torch.Tensor:
    return q.view(torch.uint8)


def _e4m3_values() -> torch.Tensor:
    """All finite non-negative e4m3 values, ascending."""
    v = torch.arange(0, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    return v.sort().values


def _hard_inputs() -> torch.Tensor:
    """Every e4m3 value, every midpoint between neighbours (ties), one fp32 ulp either side of
    each midpoint, both signs, plus random magnitudes over the whole range and specials."""
    v = _e4m3_values()
    mids = (v[1:] + v[:-1]) / 2
    up = torch.nextafter(mids, torch.full_like(mids, math.inf))
    down = torch.nextafter(mids, torch.zeros_like(mids))
    g = torch.Generator().manual_seed(0)
    rand = torch.exp2(torch.empty(20000).uniform_(-14, 9.2, generator=g)) * torch.empty(20000).uniform_(
        1, 2, generator=g
    )
    pos = torch.cat(
        [v, mids, up, down, rand, torch.tensor([125.4, 447.99, 448.0, 464.0, 479.9, 1e30, 1e-30])]
    )
    return torch.cat([pos, -pos])


def test_triton_rounding_equals_torch_float8_e4m3fn_bit_for_bit() -> None:
    x = _hard_inputs()
    ref = _bits(fp8_kv.quantize_fp8(x, ONE))
    tri = _bits(fp8_kv.quantize_fp8_triton(x, ONE))
    bad = (ref != tri).nonzero().flatten()
    assert bad.numel() == 0, f"{bad.numel()} mismatches, e.g. {x[bad[:5]].tolist()}"


def test_binade_boundary_rounds_up_into_next_exponent() -> None:
    x = torch.tensor([125.4, 124.0, 120.0, 0.0155, 0.0146])
    tri = fp8_kv.quantize_fp8_triton(x, ONE).float()
    assert tri.tolist() == [128.0, 128.0, 120.0, 0.015625, 0.013671875]
    assert torch.equal(tri, x.to(torch.float8_e4m3fn).float())


def test_dequantize_all_256_codes_matches_torch() -> None:
    codes = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn)
    ref = codes.float()
    tri = fp8_kv.dequantize_fp8_triton(codes, ONE)
    assert torch.equal(ref.nan_to_num(7.0), tri.nan_to_num(7.0))
    assert torch.equal(torch.signbit(ref), torch.signbit(tri))
    assert int(torch.isnan(tri).sum()) == 2  # 0x7F and 0xFF are the only NaNs in e4m3fn


@pytest.mark.parametrize("impl", ["reference", "triton"])
def test_saturation_inf_and_nan(impl: str) -> None:
    quant = fp8_kv.quantize_fp8 if impl == "reference" else fp8_kv.quantize_fp8_triton
    x = torch.tensor([1000.0, -1000.0, 449.0, math.inf, -math.inf, math.nan, -math.nan, 3.0])
    bits = _bits(quant(x, ONE)).tolist()
    assert bits[:5] == [0x7E, 0xFE, 0x7E, 0x7E, 0xFE]  # +-448, never the NaN code
    assert bits[5] & 0x7F == 0x7F and bits[6] & 0x7F == 0x7F  # NaN stays NaN
    assert quant(x, ONE).float()[7] == 3.0


def test_scale_is_amax_over_448_and_ignores_non_finite() -> None:
    x = torch.tensor([[[1.0, -896.0, math.nan], [0.0, 0.0, 0.0]]])  # [token=1, head=2, dim=3]
    per_row = fp8_kv.kv_scale(x, granularity="token_head")
    assert per_row.shape == (1, 2)
    assert per_row[0, 0] == 2.0
    assert per_row[0, 1] > 0  # all-zero row: tiny floor, so 0 / scale stays 0
    assert fp8_kv.kv_scale(torch.tensor([3.0, -math.inf, 448.0]), granularity="tensor") == 1.0
    q = fp8_kv.quantize_fp8(x, per_row)
    assert torch.isnan(q.float()[0, 0, 2]) and q.float()[0, 0, 1] == -448.0  # NaN stays local
    assert torch.equal(q.float()[0, 1], torch.zeros(3))


@pytest.mark.parametrize("granularity", ["tensor", "token_head"])
def test_round_trip_error_is_half_an_e4m3_step(granularity: str) -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 4, 128, generator=g) * torch.exp2(
        torch.randint(-6, 6, (64, 4, 1), generator=g).float()
    )
    scale = fp8_kv.kv_scale(x, granularity=granularity)
    s = scale if scale.dim() == 0 else scale.unsqueeze(-1)
    ref = fp8_kv.dequantize_fp8(fp8_kv.quantize_fp8(x, scale), scale)
    tri = fp8_kv.dequantize_fp8_triton(fp8_kv.quantize_fp8_triton(x, scale), scale)
    assert torch.equal(ref, tri)
    # normal range: |err| <= 2**-4 relative; subnormal range: <= half the step 2**-9 * scale
    bound = torch.maximum(x.abs() * 2.0**-4, s * 2.0**-10) * (1 + 1e-6)
    assert bool(((ref - x).abs() <= bound).all())


def _f64_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
    """Independent float64 reference through torch's SDPA."""
    group = q.shape[1] // k.shape[2]
    out = []
    for b in range(q.shape[0]):
        n = int(lens[b])
        kb = k[b, :n].double().repeat_interleave(group, dim=1).transpose(0, 1)
        vb = v[b, :n].double().repeat_interleave(group, dim=1).transpose(0, 1)
        o = torch.nn.functional.scaled_dot_product_attention(q[b].double()[:, None], kb, vb)
        out.append(o[:, 0])
    return torch.stack(out)


def _kv(bsz: int, seq: int, hkv: int, group: int, dim: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(bsz, hkv * group, dim, generator=g)
    k = torch.randn(bsz, seq, hkv, dim, generator=g)
    k[..., 3] *= 30  # an outlier key channel
    v = torch.randn(bsz, seq, hkv, dim, generator=g)
    lens = torch.tensor([seq - 7 * b for b in range(bsz)], dtype=torch.int32)
    return q / 4, k, v, lens


def test_reference_without_quantization_equals_float64_sdpa() -> None:
    q, k, v, lens = _kv(2, 50, 2, 4, 64)
    out = fp8_kv.decode_attention_ref(q, k, v, None, None, lens)  # float32 math
    assert torch.allclose(out.double(), _f64_attention(q, k, v, lens), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("group", [1, 4, 8])
@pytest.mark.parametrize("dim", [64, 128])
@pytest.mark.parametrize("granularity", ["tensor", "token_head"])
def test_triton_decode_equals_reference(group: int, dim: int, granularity: str) -> None:
    q, k, v, lens = _kv(2, 77, 2, group, dim)
    ks, vs = fp8_kv.kv_scale(k, granularity=granularity), fp8_kv.kv_scale(v, granularity=granularity)
    kq, vq = fp8_kv.quantize_fp8(k, ks), fp8_kv.quantize_fp8(v, vs)
    ref = fp8_kv.decode_attention_ref(q, kq, vq, ks, vs, lens)
    tri = fp8_kv.decode_attention_triton(q, kq, vq, ks, vs, lens, block_n=32)
    assert torch.allclose(tri, ref, atol=2e-5, rtol=1e-5)
    exact = _f64_attention(q, k, v, lens)
    assert float(torch.nn.functional.cosine_similarity(ref.double().flatten(), exact.flatten(), dim=0)) > 0.99


def test_gqa_query_head_reads_kv_head_h_div_group() -> None:
    bsz, seq, hkv, group, dim = 1, 10, 3, 4, 64
    q = torch.randn(bsz, hkv * group, dim)
    k = torch.zeros(bsz, seq, hkv, dim)
    v = torch.arange(hkv, dtype=torch.float32).reshape(1, 1, hkv, 1).expand(bsz, seq, hkv, dim) + 1
    kq, vq = fp8_kv.quantize_fp8(k, ONE), fp8_kv.quantize_fp8(v, ONE)  # 1, 2, 3 are exact in e4m3
    out = fp8_kv.decode_attention_triton(q, kq, vq, ONE, ONE, torch.tensor([seq]))
    expected = (torch.arange(hkv * group) // group + 1).float()
    assert torch.allclose(out[0, :, 0], expected)


@pytest.mark.parametrize("granularity", ["tensor", "token_head"])
def test_paged_equals_contiguous(granularity: str) -> None:
    bsz, seq, hkv, group, dim, page = 2, 64, 2, 4, 128, 16
    q, k, v, lens = _kv(bsz, seq, hkv, group, dim, seed=3)
    n_pages = seq // page
    perm = torch.randperm(bsz * n_pages, generator=torch.Generator().manual_seed(5))
    table = perm.reshape(bsz, n_pages).to(torch.int32)
    kc = torch.zeros(bsz * n_pages + 3, page, hkv, dim)  # spare blocks stay unused
    vc = torch.zeros_like(kc)
    kc[perm] = k.reshape(-1, page, hkv, dim)
    vc[perm] = v.reshape(-1, page, hkv, dim)
    ks, vs = fp8_kv.kv_scale(kc, granularity=granularity), fp8_kv.kv_scale(vc, granularity=granularity)
    kq, vq = fp8_kv.quantize_fp8(kc, ks), fp8_kv.quantize_fp8(vc, vs)
    paged_ref = fp8_kv.paged_decode_attention_ref(q, kq, vq, ks, vs, table, lens)
    paged_tri = fp8_kv.paged_decode_attention_triton(q, kq, vq, ks, vs, table, lens)
    # the same bytes laid out contiguously
    k_lin, v_lin = (
        kq.view(torch.uint8)[perm].reshape(bsz, seq, hkv, dim),
        vq.view(torch.uint8)[perm].reshape(bsz, seq, hkv, dim),
    )
    if granularity == "tensor":
        ks_lin, vs_lin = ks, vs
    else:
        ks_lin, vs_lin = ks[perm].reshape(bsz, seq, hkv), vs[perm].reshape(bsz, seq, hkv)
    contiguous = fp8_kv.decode_attention_ref(q, k_lin, v_lin, ks_lin, vs_lin, lens)
    assert torch.allclose(paged_ref, contiguous, atol=1e-6)
    assert torch.allclose(paged_tri, contiguous, atol=2e-5, rtol=1e-5)


def test_nan_in_cache_poisons_only_its_sequence() -> None:
    q, k, v, lens = _kv(2, 20, 1, 2, 64)
    v[0, 5, 0, 7] = math.nan
    ks, vs = fp8_kv.kv_scale(k, granularity="tensor"), fp8_kv.kv_scale(v, granularity="tensor")
    kq, vq = fp8_kv.quantize_fp8_triton(k, ks), fp8_kv.quantize_fp8_triton(v, vs)
    out = fp8_kv.decode_attention_triton(q, kq, vq, ks, vs, lens)
    assert torch.isnan(out[0, :, 7]).all() and torch.isfinite(out[1]).all()
    assert torch.isfinite(out[0, :, :7]).all()


def test_decode_rejects_bad_inputs() -> None:
    q, k, v, lens = _kv(1, 8, 2, 2, 64)
    s = fp8_kv.kv_scale(k, granularity="tensor")
    kq, vq = fp8_kv.quantize_fp8(k, s), fp8_kv.quantize_fp8(v, s)
    with pytest.raises(ValueError, match="seq_lens"):
        fp8_kv.decode_attention_triton(q, kq, vq, s, s, torch.tensor([0]))
    with pytest.raises(ValueError, match="float8"):
        fp8_kv.decode_attention_triton(q, k, v, s, s, lens)
    with pytest.raises(ValueError, match="multiple"):
        fp8_kv.decode_attention_ref(q[:, :3], kq, vq, s, s, lens)


# --- calibration and the SGLang / vLLM --quantization-param-path file ---------------------------


def _calibrated(num_layers: int = 3, heads: int = 4) -> fp8_kv.KVScales:
    cal = fp8_kv.KVScaleCalibrator(num_layers, heads)
    g = torch.Generator().manual_seed(0)
    for layer in range(num_layers):
        for _ in range(2):  # two batches: the running max must hold
            k = torch.randn(5, 7, heads, 64, generator=g) * (layer + 1)
            v = torch.randn(5, 7, heads, 64, generator=g)
            k[0, 0, heads - 1, 0] = math.inf  # ignored, like NaN
            cal.observe(layer, k, v)
    return cal.scales()


def test_calibrator_keeps_running_amax_per_layer_and_head() -> None:
    cal = fp8_kv.KVScaleCalibrator(1, 2)
    cal.observe(0, torch.tensor([[[1.0, -3.0], [2.0, 0.0]]]), torch.zeros(1, 2, 2))
    cal.observe(0, torch.tensor([[[0.5, 0.0], [-5.0, math.nan]]]), torch.full((1, 2, 2), 0.25))
    s = cal.scales()
    assert s.k_amax == ((3.0, 5.0),) and s.v_amax == ((0.25, 0.25),)
    assert s.k_scale() == {0: 5.0 / 448} and s.v_scale() == {0: 0.25 / 448}
    with pytest.raises(ValueError, match="layers"):
        fp8_kv.KVScaleCalibrator(2, 2).scales()


def test_exported_json_has_sglang_shape(tmp_path) -> None:
    scales = _calibrated()
    path = fp8_kv.export_sglang_kv_scales(scales, tmp_path / "kv.json", model_type="llama")
    raw = json.loads(path.read_text())
    assert raw["model_type"] == "llama"
    assert raw["kv_cache"]["dtype"] == "float8_e4m3fn"
    sf = raw["kv_cache"]["scaling_factor"]
    assert list(sf) == ["0"] and list(sf["0"]) == ["0", "1", "2"]  # tp rank -> layer, string keys
    for layer in range(3):  # one scale for K and V, as SGLang sets k_scale = v_scale = it
        assert sf["0"][str(layer)] == max(scales.k_scale()[layer], scales.v_scale()[layer])
    loaded = fp8_kv.load_sglang_kv_scales(path, tp_rank=0, num_layers=3, model_type="llama")
    assert loaded == {i: sf["0"][str(i)] for i in range(3)}


def test_exported_json_validates_against_sglangs_schema(tmp_path) -> None:
    """Mirror SGLang's pydantic QuantParamSchema (weight_utils.py): Dict[int, Dict[int, float]]."""
    pydantic = pytest.importorskip("pydantic")

    class KVCacheQuantSchema(pydantic.BaseModel):
        dtype: str
        scaling_factor: dict[int, dict[int, float]]

    class QuantParamSchema(pydantic.BaseModel):
        model_type: str | None
        kv_cache: KVCacheQuantSchema

    path = fp8_kv.export_sglang_kv_scales(_calibrated(), tmp_path / "kv.json", model_type="qwen2", tp_size=2)
    schema = QuantParamSchema.model_validate(json.loads(path.read_text()))
    assert schema.kv_cache.dtype == "float8_e4m3fn"
    assert set(schema.kv_cache.scaling_factor) == {0, 1}
    assert set(schema.kv_cache.scaling_factor[1]) == {0, 1, 2}


def test_tensor_parallel_ranks_take_the_amax_of_their_heads() -> None:
    scales = fp8_kv.KVScales(k_amax=((1.0, 2.0, 3.0, 4.0),), v_amax=((0.0, 0.0, 0.0, 8.0),))
    assert scales.rank_scales(2) == {0: {0: 2.0 / 448}, 1: {0: 8.0 / 448}}
    # more ranks than KV heads: heads are replicated, rank r holds head r // (tp / heads)
    two = fp8_kv.KVScales(k_amax=((1.0, 2.0),), v_amax=((0.0, 0.0),))
    assert two.rank_scales(4) == {0: {0: 1 / 448}, 1: {0: 1 / 448}, 2: {0: 2 / 448}, 3: {0: 2 / 448}}
    with pytest.raises(ValueError, match="split"):
        scales.rank_scales(3)


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda d: d["kv_cache"].update(dtype="float8_e5m2"), "dtype"),
        (lambda d: d["kv_cache"]["scaling_factor"]["0"].pop("1"), "layers"),
        (lambda d: d["kv_cache"]["scaling_factor"]["0"].update({"0": 0.0}), "positive"),
        (lambda d: d["kv_cache"]["scaling_factor"].update({"2": {"0": 1.0, "1": 1.0}}), "tp ranks"),
        (lambda d: d.pop("model_type"), "model_type"),
    ],
)
def test_loader_rejects_what_sglang_would_silently_replace_by_1(tmp_path, mutate, match) -> None:
    obj = sglang_kv_scales_dict({0: {0: 0.5, 1: 0.25}}, model_type="llama")
    mutate(obj)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(obj))
    with pytest.raises(ValueError, match=match):
        fp8_kv.load_sglang_kv_scales(path, num_layers=2)
