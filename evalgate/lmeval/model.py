"""An lm-eval ``LM`` registered as ``evalgate``: lm-eval's own evaluator over evalgate's scorers.

lm-eval's ``local-completions`` needs echo logprobs, which llama-server does not have: its
multiple-choice scores would sit at chance, silently. This model scores log-likelihoods the
way evalgate does (forced continuation tokens on llama-server), so lm-eval users get real
numbers from the same servers, and evalgate's per-item records can be cross-checked against
lm-eval's evaluator::

    import evalgate.lmeval.model, lm_eval
    lm_eval.simple_evaluate(model="evalgate",
                            model_args="base_url=http://127.0.0.1:8080,api_key=KEY", tasks=["arc_easy"])

or lm-eval's own command line with this model registered (the key from ``EVALGATE_API_KEY``, so
it stays out of lm-eval's results JSON)::

    python -m evalgate.lmeval run --model evalgate --model_args base_url=http://127.0.0.1:8080 \
        --tasks arc_easy --log_samples --output_path out/

Perplexity tasks (``loglikelihood_rolling``: wikitext) are scored as lm-eval's own ``HFLM`` does
(lm_eval/models/huggingface.py ``loglikelihood_rolling``): the document's tokens are cut into
windows by ``lm_eval.utils.get_rolling_token_windows`` (context_len 1, the first window behind
one prefix token: ``HFLM.prefix_token_id``, the tokenizer's BOS, else its EOS) and made disjoint
by ``make_disjoint_window``; each window's tokens are teacher-forced through the scorer's
``token_distributions`` and the document's loglik is the sum over every window. ``max_length``
(default: the server's slot context less one, so a whole window fits a slot) and
``prefix_token_id`` (default: llama-server's ``/props`` ``bos_token``, else ``eos_token``) are
model_args, as on ``HFLM``.
"""

from __future__ import annotations

import asyncio
import math
import os
from pathlib import Path
from typing import Any

from lm_eval.__main__ import cli_evaluate
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from evalgate.engines import DEFAULT_ENGINE, ServerHandle
from evalgate.engines.api import Generation
from evalgate.engines.llamacpp import LlamaCppScorer

__all__ = ["EvalgateLM"]


@register_model("evalgate")
class EvalgateLM(LM):
    """lm-eval model over a running server, scored through the evalgate engine's scorer."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        engine: str = DEFAULT_ENGINE,
        concurrency: int = 4,
        max_length: int | None = None,
        prefix_token_id: int | None = None,
        **_: Any,
    ) -> None:
        super().__init__()
        if engine != DEFAULT_ENGINE:  # the adapter is llama.cpp's scorer
            raise ValueError(f"engine {engine!r} has no lm-eval adapter yet; use {DEFAULT_ENGINE}")
        self.handle = ServerHandle(
            "lm-eval",
            base_url.rstrip("/"),
            api_key or os.environ.get("EVALGATE_API_KEY", ""),
            [],
            Path(os.devnull),
        )
        self.concurrency = int(concurrency)
        self.max_length = int(max_length) if max_length is not None else None
        self.prefix_token_id = int(prefix_token_id) if prefix_token_id is not None else None

    def _run(self, coros_factory: Any) -> list[Any]:
        async def go() -> list[Any]:
            scorer = LlamaCppScorer(self.handle, concurrency=self.concurrency)
            try:
                return list(await asyncio.gather(*coros_factory(scorer)))
            finally:
                await scorer.aclose()

        return asyncio.run(go())

    def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        outs = self._run(lambda s: [s.loglikelihood(*r.args) for r in requests])
        return [(ll, greedy) for ll, greedy, _ in outs]

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        def calls(s: Any) -> list[Any]:
            out = []
            for r in requests:
                context, gen = r.args
                out.append(
                    s.generate(
                        context,
                        Generation(
                            max_tokens=int(gen.get("max_gen_toks", 256)),
                            stop=tuple(gen.get("until", [])),
                            temperature=float(gen.get("temperature", 0.0)),
                        ),
                    )
                )
            return out

        return [o["text"] for o in self._run(calls)]

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        """Per document (``request.args == (text,)``), the sum of its tokens' logprobs over lm-eval's
        rolling windows (module docstring); documents run concurrently, one's windows in order."""

        async def go() -> list[float]:
            scorer = LlamaCppScorer(self.handle, concurrency=self.concurrency)
            try:
                prefix = self.prefix_token_id
                if prefix is None:
                    prefix = await _prefix_token(scorer)
                max_len = self.max_length or max(2, (await scorer.context_length()) - 1)
                docs = [_rolling(scorer, r.args[0], prefix=prefix, max_len=max_len) for r in requests]
                return list(await asyncio.gather(*docs))
            finally:
                await scorer.aclose()

        return asyncio.run(go())


async def _prefix_token(scorer: LlamaCppScorer) -> int:
    """HFLM's ``prefix_token_id`` default on a llama-server: its BOS token (``/props``
    ``bos_token``), else its EOS, as one token id of the server's own tokenizer."""
    props = await scorer.server_props()
    for key in ("bos_token", "eos_token"):
        text = props.get(key)
        if isinstance(text, str) and text:
            ids = await scorer.tokenize(text)
            if len(ids) == 1:
                return ids[0]
    raise ValueError(
        "the server names no BOS or EOS token that tokenizes to one id; pass prefix_token_id=ID in --model_args"
    )


async def _rolling(scorer: LlamaCppScorer, text: str, *, prefix: int, max_len: int) -> float:
    """One document's loglik: lm-eval's disjoint rolling windows, each teacher-forced."""
    tokens = await scorer.tokenize(text)
    windows = get_rolling_token_windows(
        token_list=tokens, prefix_token=prefix, max_seq_len=max_len, context_len=1
    )
    total = 0.0
    for context, predicted in map(make_disjoint_window, windows):
        positions = await scorer.token_distributions([*context, *predicted], start=len(context), top_k=1)
        total += math.fsum(logprob for logprob, _ in positions)
    return total


def main() -> None:
    """lm-eval's CLI (``lm_eval``'s own parser and evaluator) with the ``evalgate`` model registered."""
    cli_evaluate()
