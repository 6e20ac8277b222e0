# Type stubs of the extension module (python/src/). The public API is ctxprune_rs/__init__.py,
# which wraps these with argument checks and docs.
from os import PathLike
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union, final

from typing_extensions import Self

import numpy as np
import numpy.typing as npt

__all__ = [
    "Engine", "Pool", "Selector", "Selection", "Reranker", "Reranked", "MaskSession", "Encoder",
    "TokenCounter", "Service", "count_tokens", "float_rows", "flops", "etc", "plan", "segment", "mass_file",
    "mass_arrays", "heatmap_matrices", "draw_heatmap", "decay", "probe", "DEFAULT_PLACEHOLDER",
]

DEFAULT_PLACEHOLDER: str

@final
class Engine:
    def __new__(
        cls,
        backend: str = "auto",
        *,
        device: int = 0,
        cache_dir: Optional[Union[str, PathLike[str]]] = None,
        cuda_roots: Sequence[Union[str, PathLike[str]]] = ...,
    ) -> Self: ...
    @property
    def backend(self) -> str: ...
    @property
    def fallback_reason(self) -> Optional[str]: ...
    @property
    def device(self) -> Optional[int]: ...
    def describe(self) -> str: ...
    def _options(self) -> Tuple[str, int, Optional[str], List[str]]: ...

@final
class Pool:
    def __new__(cls, engine: Engine, embeddings: npt.NDArray[Any], storage: str = "f32") -> Self: ...
    def __len__(self) -> int: ...
    @property
    def dim(self) -> int: ...
    @property
    def on_device(self) -> bool: ...
    @property
    def storage(self) -> str: ...
    @property
    def backend(self) -> str: ...
    def rows(self) -> npt.NDArray[np.float32]: ...
    def unit_rows(self) -> npt.NDArray[np.float32]: ...
    @property
    def _unit(self) -> bool: ...
    @staticmethod
    def _from_unit_rows(engine: Engine, rows: npt.NDArray[Any], storage: str = "f32") -> "Pool": ...

@final
class Selection:
    @property
    def indices(self) -> npt.NDArray[np.int64]: ...
    @property
    def gains(self) -> npt.NDArray[np.float64]: ...
    @property
    def stop(self) -> Optional[str]: ...
    @property
    def threshold(self) -> Optional[float]: ...
    @property
    def tokens(self) -> float: ...
    @property
    def notes(self) -> list[str]: ...
    @property
    def backend(self) -> str: ...
    @property
    def method(self) -> str: ...
    @property
    def mode(self) -> str: ...
    def __len__(self) -> int: ...

@final
class Selector:
    def __new__(
        cls,
        engine: Engine,
        method: str = "mmr",
        *,
        mode: str = "greedy",
        k: Optional[int] = None,
        token_budget: Optional[float] = None,
        lambda_: Optional[float] = None,
        threshold: Optional[float] = None,
        preset: Optional[str] = None,
        weights: Optional[Sequence[float]] = None,
    ) -> Self: ...
    def select(
        self,
        pool: Union[Pool, npt.NDArray[Any], None],
        query: Optional[npt.NDArray[Any]] = None,
        *,
        costs: Optional[Sequence[float]] = None,
        retained: Sequence[int] = ...,
        texts: Optional[Sequence[str]] = None,
        query_text: Optional[str] = None,
    ) -> Selection: ...
    def select_many(
        self,
        pool: Pool,
        queries: npt.NDArray[Any],
        *,
        costs: Optional[Sequence[float]] = None,
        retained: Sequence[int] = ...,
    ) -> List[Selection]: ...
    @property
    def method(self) -> str: ...
    @property
    def mode(self) -> str: ...

@final
class Reranked:
    @property
    def indices(self) -> npt.NDArray[np.int64]: ...
    @property
    def scored(self) -> npt.NDArray[np.int64]: ...
    @property
    def scores(self) -> npt.NDArray[np.float64]: ...
    @property
    def oracle_calls(self) -> int: ...
    @property
    def kappa(self) -> Optional[float]: ...
    @property
    def notes(self) -> list[str]: ...
    @property
    def backend(self) -> str: ...
    @property
    def oracle_rounds(self) -> int: ...
    @property
    def prior_alpha(self) -> Optional[float]: ...
    @property
    def tokens(self) -> Optional[int]: ...
    @property
    def hyperparameters(self) -> Optional[Dict[str, float]]: ...
    def __len__(self) -> int: ...

@final
class Reranker:
    def __new__(
        cls,
        engine: Engine,
        budget: int,
        capacity: int,
        method: str = "boundary-morph",
        *,
        kernel: Optional[str] = None,
        kappa: Optional[float] = None,
        prior: Optional[str] = None,
        acquisition: Optional[str] = None,
        beta0: Optional[float] = None,
        graph_degree: Optional[int] = None,
        seed_div: Optional[float] = None,
        frac: Optional[float] = None,
        batch: Optional[int] = None,
        token_capacity: Optional[int] = None,
        prior_probes: Optional[int] = None,
        row_precision: Optional[str] = None,
        hyperparameters: Optional[str] = None,
        feedback_neighbours: Optional[float] = None,
    ) -> Self: ...
    def rerank(
        self,
        pool: Pool,
        query: npt.NDArray[Any],
        oracle: Union[str, Callable[[npt.NDArray[np.int64]], Any]],
        *,
        texts: Optional[Sequence[str]] = None,
        query_text: Optional[str] = None,
        api: Optional[str] = None,
        timeout: Optional[float] = None,
        retries: Optional[int] = None,
        tokens: Optional[Sequence[int]] = None,
    ) -> Reranked: ...
    @property
    def method(self) -> str: ...

@final
class MaskSession:
    def __new__(
        cls,
        format: str = "auto",
        *,
        preset: Optional[str] = None,
        edit: Optional[str] = None,
        window: Optional[int] = None,
        keep_errors: Optional[bool] = None,
        keep_first: Optional[bool] = None,
        tools_keep: Optional[Sequence[str]] = None,
        tools_mask: Optional[Sequence[str]] = None,
        trigger_tokens: Optional[int] = None,
        clear_at_least: Optional[int] = None,
        step: Optional[int] = None,
        unit: Optional[str] = None,
        anchor: Optional[str] = None,
        hold: Optional[bool] = None,
        clear_tool_inputs: Optional[bool] = None,
        placeholder: Optional[str] = None,
        tokenizer: str = "o200k_base",
        encoder: Optional["Encoder"] = None,
        semantic_method: Optional[str] = None,
        semantic_tau: Optional[float] = None,
        query_text: Optional[str] = None,
    ) -> Self: ...
    def mask_json(self, text: str) -> Tuple[str, dict[str, int]]: ...

def count_tokens(text: str, tokenizer: str = "o200k_base") -> int: ...
def float_rows(rows: Any, what: str) -> Optional[npt.NDArray[np.float32]]: ...

@final
class TokenCounter:
    def __new__(cls, tokenizer: str = "o200k_base") -> Self: ...
    @property
    def name(self) -> str: ...
    def count(self, text: str) -> int: ...
    def count_many(self, texts: List[str]) -> List[int]: ...

@final
class Service:
    def __new__(
        cls,
        engine: Engine,
        *,
        pools: List[Tuple[str, str]] = ...,
        models: List[Tuple[str, str]] = ...,
        tokenizers: List[Tuple[str, str]] = ...,
        max_body_bytes: Optional[int] = None,
        timeout: Optional[float] = None,
        max_concurrent: Optional[int] = None,
        threads: Optional[int] = None,
        max_work: Optional[float] = None,
        max_request_memory: Optional[int] = None,
        max_queue: Optional[int] = None,
        max_pool_bytes: Optional[int] = None,
        oracle_url: Optional[str] = None,
        oracle_api: Optional[str] = None,
        allow_oracle_urls: bool = False,
        log: bool = False,
        max_embed_tokens: Optional[int] = None,
    ) -> Self: ...
    def handle(
        self, method: str, path: str, body: Optional[bytes] = None, headers: List[Tuple[str, str]] = ...
    ) -> Tuple[int, List[Tuple[str, str]], bytes]: ...

@final
class Encoder:
    def __new__(cls, model: Union[str, PathLike[str]]) -> Self: ...
    @property
    def dim(self) -> int: ...
    @property
    def model(self) -> str: ...
    def embed(
        self, texts: List[str], *, batch_size: int = 32, progress: Optional[Callable[[int, int], Any]] = None
    ) -> npt.NDArray[np.float32]: ...
def flops(
    config: Optional[str] = None,
    *,
    config_json: Optional[str] = None,
    layers: Optional[int] = None,
    hidden: Optional[int] = None,
    ffn: Optional[int] = None,
    q_heads: Optional[int] = None,
    kv_heads: Optional[int] = None,
    experts_active: Optional[int] = None,
    activation: Optional[str] = None,
    context: int = 32768,
    sliding_layers: Optional[int] = None,
    window: Optional[int] = None,
) -> dict[str, Any]: ...
def etc(input_noncached: float, input_cached: float, output: float, *, alpha: float = 0.3, beta: float = 5.0) -> float: ...
def plan(depth: int, *, window: int = 20, stride: int = 10) -> dict[str, Any]: ...
def segment(prompt: str, tokenizer: Union[str, PathLike[str]], template: str = "qwen") -> str: ...
def mass_file(
    engine: Engine, tensors: Union[str, PathLike[str]], segments: str, head_dim: Optional[int] = None
) -> str: ...
def mass_arrays(
    engine: Engine,
    segments: str,
    heads: int,
    kv_heads: int,
    head_dim: int,
    queries: Sequence[npt.NDArray[Any]],
    keys: Sequence[npt.NDArray[Any]],
) -> str: ...
def heatmap_matrices(mass: str) -> Tuple[List[float], List[float], int]: ...
def draw_heatmap(mass: str, path: Union[str, PathLike[str]], title: str) -> None: ...
def decay(
    masses: Sequence[str], png: Optional[Union[str, PathLike[str]]] = None,
    title: str = "attention by relative position of the past turn",
) -> str: ...
def probe(
    trajectories: Union[str, PathLike[str]],
    labels: Union[str, PathLike[str]],
    *,
    prefixes: int = 8,
    folds: int = 5,
    seed: int = 0,
    search_tools: Optional[Sequence[str]] = None,
    open_tools: Optional[Sequence[str]] = None,
    tokenizer: str = "o200k_base",
    plot: Optional[Union[str, PathLike[str]]] = None,
) -> str: ...
