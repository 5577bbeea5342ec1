"""The sampling fields of a request (chat or completions), validated as vLLM does, into a `sampling.Sampling`.

Accepted as vLLM accepts them: `temperature`, `top_p`, `top_k`, `min_p`, `seed`, `n`, `stop`, `presence_penalty`,
`frequency_penalty`, `repetition_penalty`, `logit_bias`, `ignore_eos`. An omitted `temperature` is 0 (greedy: what
the router was certified on; vLLM's default is the checkpoint's generation config); sampling applies to the call that
writes the visible answer (sampling.py). Refused, with a 400 naming the field, only what this server cannot honour:
`REFUSED` with a value other than its neutral one.
"""
from __future__ import annotations

from ..sampling import Sampling
from .api_error import APIError

# what cannot be honoured (no beam search, tools, grammars, ...): refused unless at a value that changes nothing
REFUSED = {
    "best_of": (1,), "use_beam_search": (False,), "length_penalty": (1,), "stop_token_ids": ([],), "bad_words": ([],),
    "tools": ([],), "tool_choice": ("none", "auto"), "functions": ([],), "function_call": ("none", "auto"),
    "response_format": ({"type": "text"},), "guided_json": (), "guided_regex": (), "guided_choice": (),
    "guided_grammar": (), "structured_outputs": (), "reasoning_effort": (), "prompt_logprobs": (0,),
}
SAMPLING_FIELDS = {"temperature", "top_p", "top_k", "min_p", "seed", "n", "stop", "presence_penalty",
                   "frequency_penalty", "repetition_penalty", "logit_bias", "ignore_eos"}
MAX_N = 16  # choices per request
MAX_STOP = 4


def _bad(message, param, code="invalid_value"):
    return APIError(400, message, param=param, code=code)


def _number(body, name, low, high, default, *, integer=False, open_low=False):
    v = body.get(name)
    if v is None:
        return default
    kinds = (int,) if integer else (int, float)
    if isinstance(v, bool) or not isinstance(v, kinds) or not (low < v if open_low else low <= v) or v > high:
        span = f"({low}, {high}]" if open_low else f"[{low}, {high}]"
        raise _bad(f"`{name}` must be {'an integer' if integer else 'a number'} in {span}. Got {v!r}.", name)
    return v


def _same(value, neutral) -> bool:
    if isinstance(value, bool) or isinstance(neutral, bool):
        return value is neutral
    return value == neutral


def check_refused(body: dict) -> None:
    """A 400 for a field this server cannot honour (at any value other than its neutral one)."""
    for name, neutral in REFUSED.items():
        value = body.get(name)
        if value is not None and not any(_same(value, g) for g in neutral):
            allowed = " or ".join(repr(g) for g in neutral) if neutral else "omitted"
            raise _bad(f"`{name}` = {value!r} is not supported by routedvlm serve (no beam search, tools or "
                       f"structured outputs); it must be {allowed}. Remove it from the request.", name,
                       "unsupported_parameter")


def _stop(body):
    stop = body.get("stop")
    if stop is None or stop == "" or stop == []:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) or len(stops) > MAX_STOP:
        raise _bad(f"`stop` must be a non-empty string or a list of at most {MAX_STOP} of them. Got {stop!r}.", "stop")
    return tuple(stops)


def _logit_bias(body):
    bias = body.get("logit_bias")
    if not bias:
        return {}
    if not isinstance(bias, dict):
        raise _bad("`logit_bias` must map token ids to biases in [-100, 100].", "logit_bias")
    out = {}
    for key, value in bias.items():
        try:
            tid = int(key)
        except (TypeError, ValueError):
            raise _bad(f"`logit_bias` keys must be token ids. Got {key!r}.", "logit_bias") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not -100 <= value <= 100:
            raise _bad(f"`logit_bias` values must be numbers in [-100, 100]. Got {value!r} for {key!r}.", "logit_bias")
        out[tid] = float(value)
    return out


def parse_sampling(body: dict) -> tuple[Sampling | None, int]:
    """(the request's Sampling, None when it leaves greedy decoding as it is; `n`, the number of choices)."""
    check_refused(body)
    n = _number(body, "n", 1, MAX_N, 1, integer=True)
    ignore_eos = body.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        raise _bad(f"`ignore_eos` must be true or false. Got {ignore_eos!r}.", "ignore_eos")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise _bad(f"`seed` must be an integer. Got {seed!r}.", "seed")
    top_k = _number(body, "top_k", -1, 10**9, 0, integer=True)
    s = Sampling(temperature=float(_number(body, "temperature", 0, 2, 0)),
                 top_p=float(_number(body, "top_p", 0, 1, 1, open_low=True)), top_k=max(top_k, 0),
                 min_p=float(_number(body, "min_p", 0, 1, 0)), seed=seed, stop=_stop(body),
                 presence_penalty=float(_number(body, "presence_penalty", -2, 2, 0)),
                 frequency_penalty=float(_number(body, "frequency_penalty", -2, 2, 0)),
                 repetition_penalty=float(_number(body, "repetition_penalty", 0, 2, 1, open_low=True)),
                 logit_bias=_logit_bias(body), ignore_eos=ignore_eos)
    return (None if s.neutral else s), n
