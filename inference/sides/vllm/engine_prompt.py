"""The in-process engine's counterpart of `local/stages.CachedPrefix`: the large model's image+question prefix lives in the
vLLM engine's prefix cache, measured by the engine's own counters (`RequestOutput.num_cached_tokens`).

The calls are those of an HTTP side (`remote_prompt.RemotePrompt`, whose docstring says what is sent and recorded):
`large_direct` in the sample's `cache_salt` namespace; each two-stage transfer in a namespace seeded with the
`large_direct` prompt only (so it reuses exactly what an escalation reuses); the one-stage cost cold when the side
measures cold. The engine returns prompt token ids, so a priced run (--cost) needs no seeded namespaces: an
escalation reuses the full KV blocks its prompt shares with the `large_direct` prompt (`escalation_reuse`). The error
for an escalation that reused nothing names the engine's settings.
"""
from __future__ import annotations

from routedvlm.errors import BackendError

from ..http.remote_prompt import RemotePrompt


class EnginePrompt(RemotePrompt):
    """The image+question prefix of one request on an in-process vLLM engine (`sides/vllm/side.py`)."""

    counts_reuse = True

    def escalation_reuse(self, gen) -> int | None:
        """The full KV blocks `gen`'s prompt shares with the `large_direct` prompt (what vLLM's prefix cache reuses
        after that prompt alone; never the whole prompt: its last token is computed)."""
        direct, mine = getattr(self.direct_gen, "prompt_ids", None), getattr(gen, "prompt_ids", None)
        if not direct or not mine:
            return None
        common = next((i for i, (a, b) in enumerate(zip(direct, mine)) if a != b), min(len(direct), len(mine)))
        block = self.vlm.block_size()
        return min(common, len(mine) - 1) // block * block

    def _check_reuse(self, rec: dict, stage: str) -> None:
        if int(rec.get("cached_tokens") or 0) == 0:
            prompt = int(self.direct_record["prefill_tokens"]) + int(self.direct_record["cached_tokens"])
            block = self.vlm.engine_args.get("block_size")
            raise BackendError(
                f"The vLLM engine of {self.vlm.name!r} reused none of the prefix that the {stage} request shares with "
                f"this sample's large_direct request ({prompt} prompt tokens): its prefix cache is off "
                f"(enable_prefix_caching) or its KV blocks ({block} tokens) are longer than the shared prefix. Pass "
                "a smaller block_size in $ROUTEDVLM_VLLM_ENGINE_ARGS (the CPU build accepts multiples of 32), or set "
                "require_prefix_cache=False on the side to accept escalations without measured reuse.")
