"""`routedvlm serve`: RoutedVLM as an OpenAI-compatible chat-completions endpoint (FastAPI + uvicorn).

The models: `--small S --large L` (a pair), or a ladder cheapest first with `--model` repeated (`--small` and
`--large`, when given with it, go first and last); each is also served alone under its position name.

Binds 127.0.0.1 unless told otherwise; with --api-key (or $ROUTEDVLM_API_KEY) every /v1 request must send
`Authorization: Bearer <key>` (/health, /ready and /metrics need none, as with vLLM). The server listens at
once and loads the models in the background (/ready answers 503 until they are loaded); a load failure ends
it with exit status 2. Torch, transformers and FastAPI are imported only when serving starts.

Bounds: a connection that sends no complete request head within --header-timeout seconds is closed, an idle
kept-alive one after --keep-alive-timeout; a body slower than --min-body-rate or longer than --body-timeout is
answered 408; connections beyond --max-connections or --max-connections-per-client take one of --probe-slots
(probes only) or are answered 503 with Retry-After, as are chat requests beyond --max-queued; a request's model calls stop after --request-timeout seconds
(504). On SIGTERM the server stops accepting, gives running requests --shutdown-timeout seconds, then stops
their model calls at the next token (they answer 503; a prefill under way finishes first, its length bounded by
the prompt limits), cancels what is left 5 s later and exits.
"""
from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import re
import sys
from dataclasses import dataclass, field, fields

from routedvlm.errors import ConfigError, ModelLoadError, RoutedVLMError

from .protocol import Limits

EPILOG = """examples:
  routedvlm serve --small ./small --large ./large --router models:/vlm-router@champion --port 8000
  # a ladder of three models, cheapest first (local and OpenAI-compatible servers may mix); plain models
  # 'small', 'mid', 'large'; headers x-routedvlm-models / x-routedvlm-answer-model name the models that ran
  routedvlm serve --model ./2b --model http://gpu1:8001/v1#Qwen/Qwen3-VL-4B-Instruct \\
    --model http://gpu2:8002/v1#Qwen/Qwen3-VL-8B-Instruct --router ./ladder-router --port 8000
  curl -s localhost:8000/v1/chat/completions -H 'content-type: application/json' \\
    -d '{"model": "routedvlm", "messages": [{"role": "user", "content": [{"type": "image_url",
         "image_url": {"url": "data:image/png;base64,..."}}, {"type": "text", "text": "How many bars?"}]}]}'
  curl -s localhost:8000/ready; curl -s localhost:8000/metrics
"""
REPLICA_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_MAY_BE_ZERO = ("max_connections_per_client", "probe_slots", "min_body_rate")
THREADS_HELP = ("torch CPU threads per process; 1 (the default) gives stable per-request latencies on a shared "
                "CPU, raise it on a dedicated machine; 0 keeps torch's default (one per core)")


@dataclass
class ServeConfig:
    """Settings of `routedvlm serve` (one field per flag)."""

    small: str | None = field(default=None, metadata={
        "help": "small model (the cheapest): checkpoint folder, hub id, or <base_url>#<model> of an OpenAI-compatible "
                "server (key from $ROUTEDVLM_BACKEND_API_KEY)"})
    large: str | None = field(default=None, metadata={
        "help": "large model (the most expensive): checkpoint folder, hub id, or <base_url>#<model>"})
    model: list[str] | None = field(default=None, metadata={
        "help": "a model of a ladder, cheapest first; repeat it: --model S --model M --model L (2 to 10 models, "
                "served as 'small', 'mid', 'large'; 'small', 'mid1'...'large' beyond three). With --small / --large "
                "the ladder is --small, each --model in order, then --large"})
    router: str = field(default="models:/vlm-router@champion",
                        metadata={"help": "router folder, models:/name@alias, 'mutual-verification' or a strategy id"})
    fallback: str = field(default="mutual-verification", metadata={"help": "policy used when the router fails"})
    tracking_uri: str | None = field(default=None, metadata={"help": "MLflow tracking URI for models:/ routers"})
    host: str = field(default="127.0.0.1", metadata={"help": "address to bind (loopback by default)"})
    port: int = field(default=8000, metadata={"help": "TCP port"})
    api_key: str | None = field(default=None, metadata={"help": "require 'Authorization: Bearer KEY' (default $ROUTEDVLM_API_KEY)"})
    feedback_key: str | None = field(default=None, metadata={
        "help": "the key POST /v1/audit/feedback needs (default $ROUTEDVLM_FEEDBACK_KEY; none: gold feedback is off). "
                "The chat key does not authorise gold: give it only to whoever grades answers"})
    served_model_name: str = field(default="routedvlm", metadata={"help": "model id of the routed model"})
    max_images: int = field(default=1, metadata={"help": "max images per request"})
    max_image_pixels: int = field(default=4096 * 4096, metadata={"help": "max width*height per image"})
    max_text_chars: int = field(default=20_000, metadata={"help": "max characters of text per request"})
    max_body_bytes: int = field(default=Limits.max_body_bytes, metadata={
        "help": "max bytes of a request body (413 beyond, refused before it is read in full)"})
    max_messages: int = field(default=Limits.max_messages, metadata={"help": "max messages per request"})
    max_content_parts: int = field(default=Limits.max_content_parts, metadata={
        "help": "max content parts over all messages of a request"})
    max_prompt_tokens: int | None = field(default=None, metadata={
        "help": "max prompt tokens after the chat template, images included; default: what fits the context "
                "(400 context_length_exceeded beyond)"})
    request_timeout: int = field(default=300, metadata={"help": "seconds after which a request's model calls stop (504)"})
    allow_checkpoint_mismatch: bool = field(default=False, metadata={
        "help": "serve the router even on checkpoints other than the ones it was trained on (policy.json records "
                "their hashes; default: refused, the fallback answers)"})
    decision_timeout: int = field(default=10, metadata={
        "help": "seconds the router's decision may take; one that overruns is answered by the fallback and /health "
                "reports the router unhealthy until it returns"})
    header_timeout: int = field(default=10, metadata={"help": "seconds a connection may take to send a request head"})
    keep_alive_timeout: int = field(default=5, metadata={"help": "seconds an idle kept-alive connection stays open"})
    max_connections: int = field(default=512, metadata={"help": "open connections at most (503 + Retry-After beyond)"})
    max_connections_per_client: int = field(default=32, metadata={
        "help": "open connections at most from one client address (503 + Retry-After beyond; 0: no limit). Behind a "
                "proxy every client shares its address: raise it or set 0"})
    probe_slots: int = field(default=8, metadata={
        "help": "connections kept beyond both limits for GET /health, /live, /ready and /metrics (at most half of "
                "them per client address; anything else there answers 503; 0: none)"})
    body_timeout: int = field(default=60, metadata={
        "help": "seconds a request body may take in all (408 beyond; see --min-body-rate)"})
    min_body_rate: int = field(default=1024, metadata={
        "help": "bytes per second a request body must keep up: it gets --header-timeout seconds plus one second per "
                "this many bytes sent, at most --body-timeout (408 beyond; 0: only --body-timeout)"})
    max_queued: int = field(default=64, metadata={"help": "chat requests in the server at once (503 + Retry-After beyond)"})
    shutdown_timeout: int = field(default=10, metadata={
        "help": "seconds running requests get to finish after SIGTERM before their model calls are stopped"})
    device: str = field(default="auto", metadata={"help": "torch device of both models: 'auto' (cuda when available, "
                                                           "else cpu), 'cpu', 'cuda', 'cuda:1', ..."})
    threads: int = field(default=1, metadata={"help": THREADS_HELP})
    dtype: str | None = field(default=None, metadata={"help": "torch dtype, e.g. bfloat16"})
    selector: str = field(default="prefix", metadata={"help": "reasoning-token selector: prefix, suffix or attention"})
    max_direct_tokens: int = field(default=32, metadata={"help": "max new tokens of a short answer"})
    max_reason_tokens: int = field(default=512, metadata={"help": "max new tokens of a reasoning run"})
    min_new_tokens: int = field(default=0, metadata={"help": "min new tokens of an answer (tiny random test models)"})
    min_reason_tokens: int = field(default=0, metadata={"help": "min new tokens of a reasoning run"})
    replica_id: str | None = field(default=None, metadata={
        "help": "this replica's name (letters, digits, '.', '_', '-'; default $ROUTEDVLM_REPLICA_ID): request ids "
                "start req-<replica>-, every response says x-routedvlm-replica, /metrics has routedvlm_replica_info "
                "(docs/deploy.md)"})
    log_level: str = field(default="info", metadata={"help": "debug, info, warning or error"})
    audit_rate: float = field(default=0.0, metadata={"help": "fraction of requests shadow-audited against the "
                                                            "certificate's reference strategy (0 = off; docs/audit.md)"})
    audit_log: str | None = field(default=None, metadata={"help": "audit log path (parts folder <path>.parts, like "
                                                                   "labels); default: audits are kept in memory only"})
    audit_replica: str | None = field(default=None, metadata={
        "help": "this server's id when several replicas share --audit-log: it writes <path>.replica-<id>.parts and "
                "`routedvlm audit report <path>` merges them (default $ROUTEDVLM_REPLICA_ID; e.g. the pod name)"})
    audit_store_inputs: bool = field(default=False, metadata={"help": "store audited requests' questions and images in "
                                                                      "the audit log (privacy: see docs/audit.md)"})
    audit_alpha: float | None = field(default=None, metadata={"help": "limit on the regret rate (default: the "
                                                                       "certificate's risk limit)"})
    audit_delta: float = field(default=0.05, metadata={"help": "level of the live bounds"})
    audit_window: int = field(default=1000, metadata={"help": "audits per epoch (0: one epoch for ever)"})
    audit_queue_size: int = field(default=64, metadata={"help": "audits waiting at most; more are skipped and counted"})

    def __post_init__(self):
        self._check_models()
        for name in ("port", "max_images", "max_image_pixels", "max_text_chars", "max_body_bytes", "max_direct_tokens",
                     "max_reason_tokens", "max_messages", "max_content_parts", "max_prompt_tokens", "request_timeout", "decision_timeout",
                     "header_timeout", "keep_alive_timeout", "max_connections", "max_queued", "shutdown_timeout",
                     "body_timeout", *_MAY_BE_ZERO):
            v = getattr(self, name)
            if v is None and name == "max_prompt_tokens":
                continue
            if name in _MAY_BE_ZERO and not isinstance(v, bool) and isinstance(v, int) and v == 0:
                continue
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0 or (name == "port" and v > 65535):
                raise ConfigError(f"The `--{name.replace('_', '-')}` flag must be a positive integer"
                                  f"{' <= 65535' if name == 'port' else ''}{' or 0' if name in _MAY_BE_ZERO else ''}. "
                                  f"Got {v!r} instead.")
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 0:
            raise ConfigError(f"The `--threads` flag must be an integer >= 0. Got {self.threads!r} instead.")
        if isinstance(self.audit_rate, bool) or not isinstance(self.audit_rate, (int, float)) or not 0 <= self.audit_rate <= 1:
            raise ConfigError(f"The `--audit-rate` flag must be a number in [0, 1]. Got {self.audit_rate!r} instead.")
        if self.replica_id is not None and not REPLICA_ID.fullmatch(self.replica_id):
            raise ConfigError(f"The `--replica-id` flag must be 1 to 63 letters, digits, '.', '_' or '-', starting "
                              f"with a letter or digit (a pod name works). Got {self.replica_id!r} instead.")
        if self.log_level not in ("debug", "info", "warning", "error"):
            raise ConfigError(f"The `--log-level` flag must be 'debug', 'error', 'info' or 'warning'. Got {self.log_level!r}.")

    @property
    def models(self) -> list[str]:
        """The ladder, cheapest first: --small, each --model, --large."""
        return [*([self.small] if self.small else []), *(self.model or []), *([self.large] if self.large else [])]

    @property
    def aliases(self) -> tuple[str, ...]:
        """The served plain models' ids: the position names of the ladder (`ladder_aliases`)."""
        from routedvlm.router.strategies import ladder_aliases

        return ladder_aliases(len(self.models))

    def _check_models(self) -> None:
        from routedvlm.router.strategies import MAX_LADDER, ladder_aliases

        models = self.models
        empty = [m for m in (self.small, self.large, *(self.model or [])) if m is not None and not str(m).strip()]
        if empty or not 2 <= len(models) <= MAX_LADDER:
            got = "an empty model" if empty else f"{len(models)} model{'s' * (len(models) != 1)}"
            raise ConfigError(f"`routedvlm serve` needs 2 to {MAX_LADDER} models, cheapest first: `--small S --large L`, "
                              f"or `--model` repeated (`--model S --model M --model L`). Got {got}.")
        if self.served_model_name in ladder_aliases(len(models)):
            raise ConfigError(f"The `--served-model-name` flag must differ from the plain models' ids "
                              f"{list(ladder_aliases(len(models)))}. Got {self.served_model_name!r}.")

    @property
    def connection_limits(self):
        from .connections import ConnectionLimits

        return ConnectionLimits(header_timeout=self.header_timeout, max_connections=self.max_connections,
                                max_connections_per_client=self.max_connections_per_client,
                                probe_slots=self.probe_slots, body_timeout=self.body_timeout,
                                min_body_rate=self.min_body_rate)

    @property
    def limits(self) -> Limits:
        return Limits(max_images=self.max_images, max_image_pixels=self.max_image_pixels, max_text_chars=self.max_text_chars,
                      max_body_bytes=self.max_body_bytes, max_messages=self.max_messages,
                      max_content_parts=self.max_content_parts, max_prompt_tokens=self.max_prompt_tokens)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="routedvlm serve", description=__doc__.splitlines()[0], epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    for f in fields(ServeConfig):
        flag = "--" + f.name.replace("_", "-")
        if f.name == "model":
            parser.add_argument(flag, action="append", metavar="SPEC", help=f.metadata["help"].replace("%", "%%"))
            continue
        if f.type in ("bool", bool):
            parser.add_argument(flag, action="store_true", help=f.metadata["help"].replace("%", "%%"))
            continue
        kind = int if f.type in ("int", int, "int | None") else float if f.type in ("float", "float | None", float) else str
        default = f.default
        shown = f" (default: {default})" if default is not None else ""
        parser.add_argument(flag, type=kind, default=default,
                            help=(f.metadata["help"] + shown).replace("%", "%%"))
    return parser


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _loader(cfg: ServeConfig):
    def load():
        from ..routed import RoutedVLM
        from ..sides.local import set_threads

        threads = set_threads(cfg.threads)
        routed = RoutedVLM.from_pretrained(
            cfg.models, cfg.router, fallback=cfg.fallback, tracking_uri=cfg.tracking_uri, selector=cfg.selector,
            max_direct_tokens=cfg.max_direct_tokens, max_reason_tokens=cfg.max_reason_tokens,
            min_new_tokens=cfg.min_new_tokens, min_reason_tokens=cfg.min_reason_tokens, device=cfg.device, dtype=cfg.dtype,
            audit_rate=cfg.audit_rate, audit=_audit_config(cfg), decision_timeout=cfg.decision_timeout,
            allow_checkpoint_mismatch=cfg.allow_checkpoint_mismatch,
        )
        routed.replica_id = cfg.replica_id
        if routed.router is None:
            print(f"warning: router {cfg.router!r} did not load ({routed.router_error}); serving the fallback "
                  f"{routed.fallback.policy.router_type!r}", file=sys.stderr)
        print(f"routedvlm ready: {cfg.served_model_name!r} over {', '.join(cfg.aliases)} (router "
              f"{routed.active_router.policy.router_type}, device {routed.pipeline.large.device}, {threads} torch "
              "thread(s))", file=sys.stderr, flush=True)
        return routed

    return load


def uvicorn_config(app, cfg: ServeConfig):
    """uvicorn's settings for `cfg`: the guarded h11 protocol (guards.py), keep-alive and graceful-shutdown times,
    and the file-descriptor limit raised to its hard maximum."""
    import resource

    import uvicorn

    from .connections import guarded_protocol
    from .guards import STOP_GRACE_S

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return uvicorn.Config(app, host=cfg.host, port=cfg.port, log_level=cfg.log_level,
                          http=guarded_protocol(cfg.header_timeout, cfg.max_connections, cfg.connection_limits),
                          timeout_keep_alive=cfg.keep_alive_timeout,
                          timeout_graceful_shutdown=cfg.shutdown_timeout + STOP_GRACE_S)


def _audit_config(cfg: ServeConfig):
    """The AuditConfig of `--audit-*` (None when not auditing); the log is the data package's AuditLog, which
    reuses the labeller's parts and lock code (this CLI is a composition root, see tests/test_layout.py)."""
    if not cfg.audit_rate:
        return None
    from ..audit.hook import AuditConfig

    log = None
    if cfg.audit_log:
        from routedvlm.data.audit import AuditLog

        log = AuditLog(cfg.audit_log, store_inputs=cfg.audit_store_inputs, replica=cfg.audit_replica)
    return AuditConfig(rate=cfg.audit_rate, log=log, store_inputs=cfg.audit_store_inputs, alpha=cfg.audit_alpha,
                       delta=cfg.audit_delta, window=cfg.audit_window, queue_size=cfg.audit_queue_size)


def _close_audit(routed) -> None:
    """Finish the queued audits (10 s at most) and write the audit log's buffered records."""
    auditor = getattr(routed, "auditor", None)
    if auditor is None:
        return
    auditor.close()
    close = getattr(auditor.sink, "close", None)
    if close is not None:
        close()


def main(argv: list[str] | None = None) -> int:
    args = vars(build_parser().parse_args(argv))
    args["replica_id"] = args["replica_id"] or os.environ.get("ROUTEDVLM_REPLICA_ID") or None
    cfg = ServeConfig(**args)
    cfg.api_key = cfg.api_key or os.environ.get("ROUTEDVLM_API_KEY") or None
    cfg.feedback_key = cfg.feedback_key or os.environ.get("ROUTEDVLM_FEEDBACK_KEY") or None
    cfg.audit_replica = cfg.audit_replica or os.environ.get("ROUTEDVLM_REPLICA_ID") or None
    if cfg.feedback_key is not None and cfg.feedback_key == cfg.api_key:
        raise ConfigError("The `--feedback-key` flag must differ from `--api-key`: gold feedback is a separate role "
                          "from chatting. Pick another key.")
    logging.basicConfig(level=cfg.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not _is_loopback(cfg.host):
        print(f"warning: binding {cfg.host} exposes the server beyond this machine"
              f"{'' if cfg.api_key else ' WITHOUT an API key (pass --api-key)'}", file=sys.stderr)
    from .guards import graceful_server
    from .server import create_app

    server = None

    def stop(exc):
        server.should_exit = True

    app = create_app(loader=_loader(cfg), on_load_error=stop, served_model=cfg.served_model_name, sides=cfg.aliases,
                     api_key=cfg.api_key, feedback_key=cfg.feedback_key, limits=cfg.limits, min_new_tokens=cfg.min_new_tokens,
                     request_timeout=cfg.request_timeout, max_queued=cfg.max_queued, replica_id=cfg.replica_id)
    server = graceful_server(uvicorn_config(app, cfg), app.state.deadlines, cfg.shutdown_timeout)
    print(f"routedvlm serving {cfg.served_model_name!r} on http://{cfg.host}:{cfg.port}/v1 (loading the models; "
          "GET /ready answers 200 once they are loaded)", file=sys.stderr, flush=True)
    server.run()
    _close_audit(app.state.serving.routed)
    error = app.state.serving.error
    if error is not None:
        if isinstance(error, RoutedVLMError):
            raise error
        raise ModelLoadError(f"Loading the models or the router failed: {type(error).__name__}: {error}") from error
    return 0
