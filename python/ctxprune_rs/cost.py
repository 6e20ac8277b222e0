"""Token cost (SPEC §4): FLOPs per decoded token from a model's shape, effective token
cost, and the sliding-window listwise reranking plan."""

from __future__ import annotations

import os
from typing import Optional, Union

from . import _native
from ._arrays import count as _count

__all__ = ["flops", "etc", "plan"]


def flops(
    config: Union[str, "os.PathLike[str]", dict, None] = None,
    *,
    layers: Optional[int] = None,
    hidden: Optional[int] = None,
    ffn: Optional[int] = None,
    q_heads: Optional[int] = None,
    kv_heads: Optional[int] = None,
    experts_active: Optional[int] = None,
    activation: Optional[str] = None,
    context: int = 32_768,
    sliding_layers: Optional[int] = None,
    window: Optional[int] = None,
) -> dict:
    """GFLOPs per decoded token at `context` tokens: {"gflops_per_token", "per_layer"}.

    The shape comes from `config` (a HuggingFace config.json path, or its dict) or from
    `layers`, `hidden`, `ffn`, `q_heads` (and `kv_heads`, by default `q_heads`);
    `experts_active`, `activation` ("swiglu", "gelu") and `sliding_layers` with `window`
    override the config."""
    import json

    path, text = None, None
    if isinstance(config, dict):
        text = json.dumps(config)
    elif config is not None:
        path = os.fspath(config)
    return _native.flops(
        path, config_json=text, layers=_count(layers, "layers"), hidden=_count(hidden, "hidden"),
        ffn=_count(ffn, "ffn"), q_heads=_count(q_heads, "q_heads"), kv_heads=_count(kv_heads, "kv_heads"),
        experts_active=_count(experts_active, "experts_active"), activation=activation,
        context=_count(context, "context"), sliding_layers=_count(sliding_layers, "sliding_layers"),
        window=_count(window, "window"),
    )


def etc(
    input_noncached: float, input_cached: float, output: float, *, alpha: float = 0.3, beta: float = 5.0
) -> float:
    """Effective token cost: `input_noncached + alpha * input_cached + beta * output`."""
    return _native.etc(input_noncached, input_cached, output, alpha=alpha, beta=beta)


def plan(depth: int, *, window: int = 20, stride: int = 10) -> dict:
    """The listwise plan over the top `depth`: {"windows": [(start, end)], "duplication"},
    windows in processing order (back to front)."""
    return _native.plan(_count(depth, "depth"), window=_count(window, "window"), stride=_count(stride, "stride"))
