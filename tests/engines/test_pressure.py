"""Pool pressure read from a server's log (#54): SGLang's retract warnings and token usage, vLLM's
preemptions and KV cache usage. The lines are built with the format strings of SGLang 0.5.23's
scheduler.py and pool_stats_observer.py and of vLLM's v1/metrics/loggers.py, and the SGLang
capacity and pressure fixtures are real logs."""

from __future__ import annotations

from pathlib import Path

from evalgate.engines.pressure import sglang_pressure, vllm_pressure

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _sglang_retract(n: int, gained: int) -> str:
    # scheduler.py: msg_prefix + msg_details, with kv_full_retract_flag
    return (
        f"[2026-12-06 02:50:01 TP0] KV cache pool is full. Retract requests. #retracted_reqs: {n}, "
        f"#new_tokens_gained: {gained}, #new_token_ratio: 0.7000 -> 1.0000"
    )


def test_sglang_retractions_and_peak_usage() -> None:
    log = "\n".join(
        [
            "[2026-12-06 02:50:00 TP0] Decode batch. #running-req: 8, #token: 900, token usage: 0.97, #queue-req: 3",
            _sglang_retract(3, 412),
            "[2026-12-06 02:50:02 TP0] Decode batch. #running-req: 5, full token usage: 0.99, swa token usage: 1.00",
            _sglang_retract(1, 100),
            "[2026-12-06 02:50:03 TP0] Testing retraction. #retracted_reqs: 7, #new_tokens_gained: 9",
        ]
    )
    p = sglang_pressure(log.splitlines())
    assert (p.kind, p.events, p.requests, p.peak_usage) == (
        "retractions",
        2,
        4,
        0.99,
    )  # swa and tests left out


def test_a_real_sglang_log_that_retracted() -> None:
    """SGLang 0.5.23 on the CPU, a 200-token pool, six 100-token chat answers (the e2e test's run)."""
    p = sglang_pressure((FIXTURES / "pressure" / "sglang_retract.log").read_text().splitlines())
    assert p.events == 1 and p.requests == 1 and p.peak_usage is not None and p.peak_usage > 0.9


def test_a_real_sglang_log_without_pressure() -> None:
    p = sglang_pressure((FIXTURES / "capacity" / "sglang_bf16.log").read_text().splitlines())
    assert p.events == p.requests == 0 and p.peak_usage is not None and p.peak_usage < 0.5


def test_vllm_preemptions_sum_over_intervals_and_usage_peaks() -> None:
    line = (
        "INFO 12-06 02:50:{s:02d} [loggers.py:248] Engine 000: Avg prompt throughput: 10.0 tokens/s, "
        "Avg generation throughput: 20.0 tokens/s, Running: 8 reqs, Waiting: 2 reqs, {pre}"
        "CPU KV cache usage: {u:.1f}%, Prefix cache hit rate: 0.0%"
    )
    log = "\n".join(
        [
            line.format(s=1, pre="", u=40.0),
            line.format(s=11, pre="Preemptions: 2, ", u=99.2),
            line.format(s=21, pre="Preemptions: 3, ", u=97.0),
        ]
    )
    p = vllm_pressure(log.splitlines())
    assert (p.kind, p.events, p.requests) == ("preemptions", 2, 5) and abs(p.peak_usage - 0.992) < 1e-12
    assert vllm_pressure([]).to_dict() == {
        "kind": "preemptions",
        "events": 0,
        "requests": 0,
        "peak_usage": None,
    }
