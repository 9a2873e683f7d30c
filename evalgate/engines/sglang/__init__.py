"""SGLang, the first-class GPU engine: launch (``_engine``), native ``/generate`` scoring
(``_scorer``), failure diagnosis (``_diagnose``), ``/server_info`` (``_server_info``), its KV pool
(``_capacity``), attach mode's reading of a running server (``_attach``), its own load
generator, ``sglang.bench_serving`` (``_bench_serving``), and its argument parser for the tests
that check evalgate's flags (``_parser``). On the CPU: the real SGLang from its own venv
(``_cpu``), which ``evalgate setup --sglang-cpu`` installs (``_cpu_install``)."""

from evalgate.engines.sglang._attach import DIALECT
from evalgate.engines.sglang._bench_serving import bench_serving_command, parse_bench_serving, run_levels
from evalgate.engines.sglang._capacity import server_info_capacity, sglang_capacity
from evalgate.engines.sglang._cpu import SGLangCPUEngine, checkpoint_dir
from evalgate.engines.sglang._cpu_install import convert_once, install_sglang_cpu, run_step
from evalgate.engines.sglang._diagnose import TESTED_VERSION, diagnose
from evalgate.engines.sglang._engine import KV_DTYPES, QUANT_KEYS, SGLangEngine
from evalgate.engines.sglang._parser import PARSER_PACKAGES, install_parsers, parser_dir
from evalgate.engines.sglang._scorer import SGLangScorer
from evalgate.engines.sglang._server_info import (
    SERVER_INFO_PATHS,
    fetch_server_info,
    get_server_info,
    parse_server_info,
    read_server_info,
    server_limits,
)

__all__ = [
    "DIALECT",
    "KV_DTYPES",
    "PARSER_PACKAGES",
    "QUANT_KEYS",
    "SERVER_INFO_PATHS",
    "TESTED_VERSION",
    "SGLangCPUEngine",
    "SGLangEngine",
    "SGLangScorer",
    "bench_serving_command",
    "checkpoint_dir",
    "convert_once",
    "diagnose",
    "fetch_server_info",
    "get_server_info",
    "install_parsers",
    "install_sglang_cpu",
    "parse_bench_serving",
    "parse_server_info",
    "parser_dir",
    "read_server_info",
    "run_levels",
    "run_step",
    "server_info_capacity",
    "server_limits",
    "sglang_capacity",
]
