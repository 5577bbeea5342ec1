"""`routedvlm profile --model <base_url>#<model id>`: the latency model of a model behind an OpenAI-compatible server.

One request in flight at a time, streamed (`stream: true`): the time to the first token prices the prefill (the
server's image preprocessing and vision encoder included: over HTTP they cannot be told apart, so the vision fit is
zero and image tokens count as prompt tokens, which is how the labeller's remote stage records count them too) and
the gaps between streamed tokens price every decode step with its context length. Each call sends a fresh random
image, so the server's prefix cache cannot hide the prefill; what it still reuses is reported as `cached_tokens`
and left out of the prefill tokens. Lengths are forced with `min_tokens` / `ignore_eos` (vLLM, SGLang).
"""
from __future__ import annotations

import json
import os
import time

_FILLER = "Look at the chart and tell me which bar is the tallest, how tall it is, and why. "


def parse_remote(spec: str) -> tuple[str, str]:
    """'<base_url>#<model id>' -> (base_url, model id) (`sides.http.remote.parse_remote`)."""
    from ..sides.http.remote import parse_remote as parse

    url, model = parse(spec)
    return url.rstrip("/"), model


def _question(n_words: int, nonce: int) -> str:
    words = (_FILLER * (n_words // 10 + 2)).split()[:n_words]
    return f"[{nonce}] " + " ".join(words)


def stream_call(http, base_url: str, model: str, image, question: str, n_out: int) -> dict:
    """One streamed chat completion of exactly `n_out` tokens: {ttft_ms, token_ms (arrival of each token after
    the first, ms since the request), prompt_tokens, cached_tokens}."""
    from routedvlm.errors import BackendError

    content = [{"type": "image_url", "image_url": {"url": _data_url(image)}}] if image is not None else []
    body = {"model": model, "messages": [{"role": "user", "content": [*content, {"type": "text", "text": question}]}],
            "max_tokens": n_out, "min_tokens": n_out, "ignore_eos": True, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, "logprobs": True, "chat_template_kwargs": {"enable_thinking": False}}
    arrivals, usage, t0 = [], {}, time.perf_counter()
    with http.stream("POST", f"{base_url}/chat/completions", json=body) as resp:
        if resp.status_code != 200:
            resp.read()
            raise BackendError(f"The OpenAI-compatible server {base_url} refused a profiling request for {model!r}: "
                               f"HTTP {resp.status_code}: {resp.text[:300]}. Check the URL and the model id.")
        for line in resp.iter_lines():
            if not line.startswith("data:") or line.strip() == "data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or []:
                n = _tokens_in(choice)
                now = (time.perf_counter() - t0) * 1000
                arrivals += [now] * n
    if not arrivals:
        raise BackendError(f"The server {base_url} streamed no token for {model!r}; is it an OpenAI-compatible server?")
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    return {"ttft_ms": arrivals[0], "token_ms": arrivals, "prompt_tokens": int(usage.get("prompt_tokens") or 0),
            "cached_tokens": cached}


def _data_url(image) -> str:
    import base64
    import io

    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _tokens_in(choice: dict) -> int:
    """Tokens a streamed chunk carries: its logprob entries, else 1 for any text in the delta."""
    entries = (choice.get("logprobs") or {}).get("content")
    if entries:
        return len(entries)
    delta = choice.get("delta") or {}
    return 1 if (delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")) else 0


def _record(meas: dict, call: dict, size, prompt: int, rep: int, output_grid: list) -> None:
    key = {"image_size": size, "prompt_tokens": prompt, "repeat": rep}
    new = max(call["prompt_tokens"] - call["cached_tokens"], 1)
    meas["prefill"].append({**key, "tokens": new, "cached_tokens": call["cached_tokens"], "ms": round(call["ttft_ms"], 4)})
    meas["vision"].append({**key, "image_tokens": 0, "ms": 0.0})
    times = call["token_ms"]
    if len(times) > 1:
        steps = [round(b - a, 4) for a, b in zip(times, times[1:])]
        meas["decode"].append({**key, "context_start": call["prompt_tokens"], "step_ms": steps})
    for n in output_grid:
        if n <= len(times):
            meas["end_to_end"].append({**key, "output_tokens": n, "ms": round(times[n - 1], 4)})


def measure_remote(spec: str, settings, progress=None, *, api_key: str | None = None, timeout: float = 300.0) -> dict:
    """Raw measurements of one server model over the settings' grid (prompt lengths in words, not tokens)."""
    import httpx

    from .inputs import random_image

    from ..sides.http.remote import API_KEY_ENV

    base_url, model = parse_remote(spec)
    api_key = api_key or os.environ.get(API_KEY_ENV)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    ref_size, ref_prompt = settings.reference
    n_dec, nonce = max(settings.output_tokens), 0
    meas = {k: [] for k in ("preprocess", "vision", "prefill", "decode", "end_to_end")}
    image_tokens = {}
    with httpx.Client(timeout=timeout, headers=headers) as http:
        for i, size in enumerate(settings.image_sizes):  # warm-up (always: not recorded) + image tokens per size
            img = stream_call(http, base_url, model, random_image(size, settings.seed + 1000 + i), _question(ref_prompt, -i), 2)
            txt = stream_call(http, base_url, model, None, _question(ref_prompt, -100 - i), 2)
            image_tokens[str(size)] = max(img["prompt_tokens"] - txt["prompt_tokens"], 0)
            if progress is not None and getattr(settings, "warmup", True):
                progress.update(1)
        for rep in range(settings.repeats):
            for size in settings.image_sizes:
                for prompt in settings.prompt_tokens:
                    nonce += 1
                    image = random_image(size, settings.seed + 7919 * nonce)
                    n_out = n_dec if size == ref_size else 1
                    call = stream_call(http, base_url, model, image, _question(prompt, nonce), n_out)
                    _record(meas, call, size, prompt, rep, settings.output_tokens)
                    if progress is not None:
                        progress.update(1)
    return {"measurements": meas, "image_tokens": image_tokens, "base_url": base_url, "model": model}


def remote_entry(spec: str, settings, progress=None, **kwargs) -> dict:
    """profile.json's entry of one server model (same shape as a local one; `parameters` unknown)."""
    from .latency_model import decode_points, end_to_end_mape, fit_components

    got = measure_remote(spec, settings, progress, **kwargs)
    meas = got["measurements"]
    fit = fit_components(dict(meas, decode=decode_points(meas["decode"])))
    size, prompt = settings.reference
    ref = [r for r in meas["prefill"] if r["image_size"] == size and r["prompt_tokens"] == prompt]
    reference = {"image_size": size, "prompt_tokens": prompt, "image_tokens": 0,
                 "prefill_tokens": round(sum(r["tokens"] for r in ref) / len(ref))}
    return {
        "path": spec, "remote": {"base_url": got["base_url"], "model": got["model"], "streamed": True,
                                 "requests_in_flight": 1},
        "parameters": None, "model_type": "remote", "dtype": None, "image_tokens": got["image_tokens"],
        "reference": reference, "fit": fit, "end_to_end_mape": end_to_end_mape(meas, fit), "measurements": meas,
    }
