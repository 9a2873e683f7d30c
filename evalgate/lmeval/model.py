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
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from lm_eval.__main__ import cli_evaluate
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model

from evalgate.engines import ServerHandle
from evalgate.engines.llamacpp import LlamaCppScorer

__all__ = ["EvalgateLM"]


@register_model("evalgate")
class EvalgateLM(LM):
    """lm-eval model over a running server, scored through the evalgate engine's scorer."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        engine: str = "llamacpp",
        concurrency: int = 4,
        **_: Any,
    ) -> None:
        super().__init__()
        if engine != "llamacpp":
            raise ValueError(f"engine {engine!r} has no lm-eval adapter yet; use llamacpp")
        self.handle = ServerHandle(
            "lm-eval",
            base_url.rstrip("/"),
            api_key or os.environ.get("EVALGATE_API_KEY", ""),
            [],
            Path(os.devnull),
        )
        self.concurrency = int(concurrency)

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
                        max_tokens=int(gen.get("max_gen_toks", 256)),
                        stop=list(gen.get("until", [])),
                        temperature=float(gen.get("temperature", 0.0)),
                    )
                )
            return out

        return [o["text"] for o in self._run(calls)]

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        raise NotImplementedError(
            "rolling log-likelihood (perplexity tasks) is not needed by evalgate's suites"
        )


def main() -> None:
    """lm-eval's CLI (``lm_eval``'s own parser and evaluator) with the ``evalgate`` model registered."""
    cli_evaluate()
