"""Intrinsic embedding (Rieber's 2022 dissertation, ch. 4): dataflow CSP, layout rewrites, intrinsic programs."""

from accelmap.embed.search import Embedding, EmbedResult, default_embedding, embed

__all__ = ["EmbedResult", "Embedding", "default_embedding", "embed"]
