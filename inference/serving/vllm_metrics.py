"""vLLM-named series beside the routedvlm_* ones, so dashboards and autoscalers built on vLLM's /metrics find
something: the same names, types and `model_name` label as vLLM 0.32 (docs/serve.md lists the mapping and what has no
counterpart here).

vllm:num_requests_running (gauge: requests being answered), vllm:request_success_total{finished_reason},
vllm:prompt_tokens_total, vllm:generation_tokens_total, vllm:e2e_request_latency_seconds (histogram),
vllm:request_prompt_tokens / vllm:request_generation_tokens (histograms per request), and for streamed responses
vllm:time_to_first_token_seconds / vllm:inter_token_latency_seconds (from the text deltas as they are sent)."""
from __future__ import annotations

TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


class VLLMMetrics:
    def __init__(self, registry, in_flight, latency_buckets):
        from prometheus_client import Counter, Gauge, Histogram

        r, label = registry, ["model_name"]
        Gauge("vllm:num_requests_running", "Requests being answered now (routedvlm_requests_in_flight).",
              registry=r).set_function(lambda: float(in_flight._value.get()))
        self.success = Counter("vllm:request_success", "Finished requests by finish reason.",
                               ["model_name", "finished_reason"], registry=r)
        self.prompt = Counter("vllm:prompt_tokens", "Prompt tokens of answered requests.", label, registry=r)
        self.generation = Counter("vllm:generation_tokens", "Generated tokens of answered requests.", label, registry=r)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "End-to-end time of answered requests.", label,
                             buckets=latency_buckets, registry=r)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Time to the first text delta of a streamed response.",
                              label, buckets=latency_buckets, registry=r)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "Time between text deltas of a streamed response.",
                             label, buckets=latency_buckets, registry=r)
        self.prompt_hist = Histogram("vllm:request_prompt_tokens", "Prompt tokens per request.", label,
                                     buckets=TOKEN_BUCKETS, registry=r)
        self.generation_hist = Histogram("vllm:request_generation_tokens", "Generated tokens per request.", label,
                                         buckets=TOKEN_BUCKETS, registry=r)

    def first_token(self, model: str, seconds: float) -> None:
        """A streamed response's first text delta, `seconds` after the request arrived."""
        self.ttft.labels(model).observe(seconds)

    def next_token(self, model: str, seconds: float) -> None:
        """The time between two text deltas of a streamed response."""
        self.itl.labels(model).observe(seconds)

    def answered(self, model: str, usage: dict, finish_reason: str | None) -> None:
        prompt, completion = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
        self.prompt.labels(model).inc(prompt)
        self.generation.labels(model).inc(completion)
        self.prompt_hist.labels(model).observe(prompt)
        self.generation_hist.labels(model).observe(completion)
        if finish_reason:
            self.success.labels(model, finish_reason).inc()

    def finished(self, model: str, seconds: float) -> None:
        self.e2e.labels(model).observe(seconds)
