"""Where an agent's attention goes (observation-masking.txt App. E) and which queries
masking rescues (the SNR probe, §5.2 / App. D): `ctxprune attention` and `ctxprune probe`
in Python, on the same library code.

    from ctxprune_rs import attention
    seg = attention.segment(prompt, "tokenizer.json")              # a dict: spans, steps
    m = attention.mass("qk.safetensors", seg)                      # or [(q, k), ...] arrays
    reasoning, observation = attention.heatmap(m)                  # T x T numpy arrays
    curves = attention.decay([m, ...], png="decay.png")
    report = attention.probe("trajectories/", "labels.jsonl")      # a dict: AUCs, rows

Results are plain dicts, the JSON the CLI writes (`attention mass --json`, `attention
decay --json`, `probe --json`), so a mass saved by one is read by the other.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _native
from ._arrays import count as _count
from ._errors import InvalidInputError

__all__ = ["segment", "mass", "heatmap", "draw_heatmap", "decay", "probe"]

PathArg = Union[str, "os.PathLike[str]"]


def _json_arg(v: Any, name: str) -> str:
    """A dict (as returned here) or the path of its JSON file, as JSON text."""
    if isinstance(v, dict):
        return json.dumps(v)
    if isinstance(v, (str, os.PathLike)):
        try:
            with open(v, encoding="utf-8") as f:
                return f.read()
        except OSError as e:
            from ._errors import FileError

            raise FileError(f"{os.fspath(v)}: {e.strerror}") from None
    raise InvalidInputError(f"invalid {name}: expected a dict or a JSON file's path, got {type(v).__name__}")


def segment(prompt: str, tokenizer: PathArg, template: str = "qwen") -> Dict[str, Any]:
    """A rendered prompt cut into (turn, role) token spans, and its reasoning steps, from
    the chat template's markers (`template`: "qwen"), tokenised by the model's
    `tokenizer.json`: {"n_tokens", "turns", "steps", "spans"}."""
    if not isinstance(prompt, str):
        raise InvalidInputError(f"invalid prompt: expected a str, got {type(prompt).__name__}")
    return json.loads(_native.segment(prompt, os.fspath(tokenizer), template))


def _layer_arrays(layers: Sequence[Any], steps: List[int], head_dim: Optional[int]):
    qs, ks = [], []
    shape: Optional[Tuple[int, int, int]] = None
    nk = steps[-1] + 1
    for l, pair in enumerate(layers):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise InvalidInputError(f"invalid layers[{l}]: expected a (q, k) pair of arrays")
        q, k = (np.asarray(a) for a in pair)
        if q.ndim == 2 and k.ndim == 2:
            if head_dim is None:
                raise InvalidInputError(f"invalid head_dim: layers[{l}] is 2-D: give the head dimension")
            q = q.reshape(q.shape[0], -1, head_dim)
            k = k.reshape(k.shape[0], -1, head_dim)
        if q.ndim != 3 or k.ndim != 3:
            raise InvalidInputError(f"invalid layers[{l}]: q and k must be [N, heads, d] and [N, kv_heads, d]")
        if q.shape[2] != k.shape[2]:
            raise InvalidInputError(f"invalid layers[{l}]: q's head dimension {q.shape[2]} is not k's {k.shape[2]}")
        s = (q.shape[1], k.shape[1], q.shape[2])
        if shape is not None and s != shape:
            raise InvalidInputError(f"invalid layers[{l}]: heads {s} differ from layer 0's {shape}")
        shape = s
        if q.shape[0] <= steps[-1] or k.shape[0] < nk:
            raise InvalidInputError(
                f"invalid layers[{l}]: {q.shape[0]} positions, but the last step is at {steps[-1]}"
            )
        qs.append(np.ascontiguousarray(q[steps].reshape(len(steps), -1), dtype=np.float32))
        ks.append(np.ascontiguousarray(k[:nk].reshape(nk, -1), dtype=np.float32))
    if shape is None:
        raise InvalidInputError("invalid layers: empty (give one (q, k) pair per hooked layer)")
    return shape, qs, ks


def mass(tensors: Any, segments: Any, *, head_dim: Optional[int] = None, engine: Any = None) -> Dict[str, Any]:
    """Attention mass by turn and role at every reasoning step (App. E.3): the share of
    each step's attention (softmax rows averaged over heads and layers) on every (turn,
    role) span. `tensors`: a safetensors file of `layers.{l}.q` [N, H, d] and
    `layers.{l}.k` [N, G, d] (`attention mass --tensors`), or one `(q, k)` pair of arrays
    per hooked layer, the same shapes (2-D with `head_dim`); `segments`: `segment()`'s
    dict or its JSON file. Runs on `engine` (CUDA where it is one). Returns the dict
    `attention mass --json` writes."""
    from . import _engine

    e = _engine(engine)
    seg = _json_arg(segments, "segments")
    hd = _count(head_dim, "head_dim")
    if isinstance(tensors, (str, os.PathLike)):
        return json.loads(_native.mass_file(e, os.fspath(tensors), seg, hd))
    if not isinstance(tensors, (list, tuple)):
        raise InvalidInputError(
            f"invalid tensors: expected a safetensors path or a list of (q, k) arrays, got {type(tensors).__name__}"
        )
    steps = json.loads(seg).get("steps") or []
    if not steps:
        raise InvalidInputError("invalid segments: no reasoning steps (steps is empty)")
    (heads, kv_heads, d), qs, ks = _layer_arrays(tensors, [int(t) for t in steps], hd)
    return json.loads(_native.mass_arrays(e, seg, heads, kv_heads, d, qs, ks))


def heatmap(m: Any) -> Tuple[np.ndarray, np.ndarray]:
    """The heat map's two T x T matrices (App. E.4) of a mass: attention from the
    reasoning of turn i to the reasoning of turn j (lower triangle), and to the
    observations of turn j."""
    a, b, t = _native.heatmap_matrices(_json_arg(m, "mass"))
    return np.asarray(a).reshape(t, t), np.asarray(b).reshape(t, t)


def draw_heatmap(m: Any, path: PathArg,
                 title: str = "attention by turn: reasoning (lower), observations (upper)") -> None:
    """Draws a mass's heat map as a PNG at `path` (`attention mass --heatmap`)."""
    _native.draw_heatmap(_json_arg(m, "mass"), os.fspath(path), title)


def decay(masses: Sequence[Any], *, png: Optional[PathArg] = None,
          title: str = "attention by relative position of the past turn") -> Dict[str, Any]:
    """The decay curves over many trajectories' masses (App. E.5): per role, the mean
    mass on a past turn by its relative position, and the cumulative share
    (`attention decay`); drawn as a PNG at `png` when given."""
    if isinstance(masses, (dict, str, os.PathLike)):
        raise InvalidInputError("invalid masses: expected a list of masses (dicts or JSON files)")
    texts = [_json_arg(m, f"masses[{i}]") for i, m in enumerate(masses)]
    return json.loads(_native.decay(texts, None if png is None else os.fspath(png), title))


def probe(trajectories: PathArg, labels: PathArg, *, prefixes: int = 8, folds: int = 5, seed: int = 0,
          search_tools: Optional[Sequence[str]] = None, open_tools: Optional[Sequence[str]] = None,
          tokenizer: PathArg = "o200k_base", plot: Optional[PathArg] = None) -> Dict[str, Any]:
    """The SNR regression probe (§5.2, App. D) on a directory of No-CM trajectories and
    a labels.jsonl (`ctxprune probe`): trace features of `prefixes` sampled prefixes per
    trajectory, a ridge fit of the evidence SNR with query-grouped `folds`, PCA1, and the
    AUCs; the scatter drawn at `plot` when given. Returns `probe --json`'s dict."""
    for name, v in (("search_tools", search_tools), ("open_tools", open_tools)):
        if isinstance(v, str):
            raise InvalidInputError(f"invalid {name}: must be a list of tool names, not a string")
    return json.loads(_native.probe(
        os.fspath(trajectories), os.fspath(labels), prefixes=_count(prefixes, "prefixes"),
        folds=_count(folds, "folds"), seed=_count(seed, "seed"),
        search_tools=None if search_tools is None else list(search_tools),
        open_tools=None if open_tools is None else list(open_tools),
        tokenizer=os.fspath(tokenizer), plot=None if plot is None else os.fspath(plot),
    ))
