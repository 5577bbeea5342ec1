"""Drive `routedvlm serve` with LiteLLM's SDK as a user would (run in .venv-clients by
tests/inference/test_serve_litellm.py): `python litellm_drive.py BASE_URL KEY` prints one JSON object with what each
call returned. Providers `openai/<model>` and `hosted_vllm/<model>` with `api_base`, LiteLLM's defaults otherwise."""
import json
import os
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # its bundled price table: no fetch from the internet


def main(base: str, key: str) -> dict:
    import litellm

    messages = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What colour is the sky?"}]
    out = {}
    for provider in ("openai", "hosted_vllm"):
        resp = litellm.completion(model=f"{provider}/routedvlm", api_base=f"{base}/v1", api_key=key, messages=messages,
                                  temperature=0.7, top_p=0.95, seed=1, max_tokens=16)
        out[provider] = {"content": resp.choices[0].message.content, "finish": resp.choices[0].finish_reason,
                         "completion_tokens": resp.usage.completion_tokens}
    chunks = list(litellm.completion(model="hosted_vllm/small", api_base=f"{base}/v1", api_key=key, messages=messages,
                                     max_tokens=12, stream=True, stream_options={"include_usage": True}))
    out["stream_chunks"] = len(chunks)
    out["stream_text"] = "".join((c.choices[0].delta.content or "") for c in chunks if c.choices)
    out["stream_reasoning"] = "".join((getattr(c.choices[0].delta, "reasoning_content", None) or "")
                                      for c in chunks if c.choices)
    text = litellm.text_completion(model="openai/small", api_base=f"{base}/v1", api_key=key, prompt="The sky is",
                                   max_tokens=5)
    out["text_completion"] = text.choices[0].text
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
