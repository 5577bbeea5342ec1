"""routedvlm serve driven by client software nobody here wrote, as a user would drive it (issue #38), against the
session's server subprocess (the tiny pair, a one-shot router, an API key): the official `openai` client's async API
with its sampling defaults, and Ray Data LLM's `HttpRequestProcessorConfig` with its documented example parameters
(`temperature=0.3`, `max_tokens=20`, `qps`). LiteLLM's SDK, whose pins conflict with the project lock, runs from its
own venv: test_serve_litellm.py."""
import asyncio

from serve_helpers import KEY, user


def test_async_openai_client_samples_streams_and_uses_n(served, images):
    from openai import AsyncOpenAI

    async def run():
        client = AsyncOpenAI(base_url=f"{served['url']}/v1", api_key=KEY, timeout=120, max_retries=0)
        messages = user(images["square"], "Color?")
        sampled = await client.chat.completions.create(model="routedvlm", messages=messages, temperature=1.0, top_p=0.9,
                                                       seed=4, n=2, max_tokens=8)
        stream = await client.chat.completions.create(model="small", messages=messages, temperature=0.7, seed=4,
                                                      max_tokens=12, stream=True,
                                                      stream_options={"include_usage": True})
        chunks = [c async for c in stream]
        text = await client.completions.create(model="small", prompt="The boxes are", max_tokens=5, temperature=0)
        await client.close()
        return sampled, chunks, text

    sampled, chunks, text = asyncio.run(run())
    assert len(sampled.choices) == 2 and all(c.message.content is not None for c in sampled.choices)
    reasoning = [c.choices[0].delta.model_extra.get("reasoning") for c in chunks if c.choices]
    assert sum(bool(r) for r in reasoning) >= 3  # token by token, not one delta at the end
    assert chunks[-1].usage.completion_tokens == 12
    assert text.object == "text_completion" and text.choices[0].text


def test_ray_data_llm_http_processor_with_its_documented_example(served):
    """Ray Data LLM's HTTP example (its docs: a calculator prompt, temperature=0.3, max_tokens=20, qps) against the
    routed model: every row an answer, none an error row (a 4xx lands in the rows while the job succeeds)."""
    import ray
    from ray.data.llm import HttpRequestProcessorConfig, build_processor

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        config = HttpRequestProcessorConfig(url=f"{served['url']}/v1/chat/completions",
                                            headers={"Authorization": f"Bearer {KEY}"}, qps=2)
        processor = build_processor(
            config,
            preprocess=lambda row: dict(payload=dict(
                model="routedvlm",
                messages=[{"role": "system", "content": "You are a calculator. Please only output the answer of the "
                                                        "given equation."},
                          {"role": "user", "content": f"{row['id']} ** 3 = ?"}],
                temperature=0.3, max_tokens=20)),
            postprocess=lambda row: dict(resp=row["http_response"]),
        )
        rows = processor(ray.data.range(4)).take_all()
    finally:
        ray.shutdown()
    assert len(rows) == 4
    for row in rows:
        assert "error" not in row["resp"], row["resp"]
        assert row["resp"]["choices"][0]["message"]["content"] is not None
        assert row["resp"]["usage"]["completion_tokens"] >= 1
