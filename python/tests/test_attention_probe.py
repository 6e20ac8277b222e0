"""`ctxprune_rs.attention` (segment, mass, heat map, decay, the SNR probe) equals
`ctxprune attention` and `ctxprune probe` on the same inputs; arrays in give the mass of
the same tensors read from a safetensors file."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from conftest import ROOT, cli

import ctxprune_rs as ctxprune
from ctxprune_rs import attention

TOKENIZER = ROOT / "tests" / "data" / "attention" / "tokenizer.json"
PROBE = ROOT / "tests" / "data" / "probe" / "queries"
PROMPT = (
    "<|im_start|>system\nYou are a helpful agent. Call tools within <tool_call></tool_call> tags.<|im_end|>\n"
    "<|im_start|>user\nFind the capital of France.<|im_end|>\n"
    "<|im_start|>assistant\n<think>\nI should search.\n</think>\n\n<tool_call>\n{\"name\": \"search\"}\n"
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n<tool_response>\nParis is the capital.\n</tool_response>\n<tool_response>\n"
    "France is in Europe.\n</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n<think>\nConfirm it.\n</think>\n\nLet me open it.\n<tool_call>\n{\"name\": \"open\"}\n"
    "</tool_call><|im_end|>\n"
    "<|im_start|>tool\nParis confirmed.<|im_end|>\n"
    "<|im_start|>assistant\n<think>\n"
)


def write_safetensors(path, tensors):
    """A safetensors file of float32 tensors (the format: an 8-byte header length, the
    JSON header, the little-endian data)."""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


@pytest.fixture
def seg(tmp_path):
    (tmp_path / "prompt.txt").write_text(PROMPT)
    s = attention.segment(PROMPT, TOKENIZER)
    assert s == cli("attention", "segment", "--prompt", str(tmp_path / "prompt.txt"), "--tokenizer", str(TOKENIZER))
    assert len(s["steps"]) == 3
    return s


def qk_layers(rng, n, layers=2, heads=4, kv_heads=2, d=8):
    return [(rng.standard_normal((n, heads, d)).astype(np.float32),
             rng.standard_normal((n, kv_heads, d)).astype(np.float32)) for _ in range(layers)]


def test_mass_heatmap_and_decay_equal_the_cli(tmp_path, rng, seg):
    layers = qk_layers(rng, seg["n_tokens"])
    f = tmp_path / "qk.safetensors"
    write_safetensors(f, {f"layers.{l}.{w}": a for l, pair in enumerate(layers) for w, a in zip("qk", pair)})
    (tmp_path / "seg.json").write_text(json.dumps(seg))
    m = attention.mass(f, seg, engine=ctxprune.Engine("cpu"))
    cli("attention", "mass", "--backend", "cpu", "--tensors", str(f), "--segments", str(tmp_path / "seg.json"),
        "--json", str(tmp_path / "m.json"))
    assert m == json.loads((tmp_path / "m.json").read_text())
    # The same tensors as arrays, and the segmentation as its file.
    assert attention.mass(layers, tmp_path / "seg.json", engine=ctxprune.Engine("cpu")) == m
    # Each step's shares sum to one with the unassigned tokens.
    for st in m["steps"]:
        assert abs(sum(map(sum, st["s"])) + st["unassigned"] - 1.0) < 1e-9
    reasoning, observation = attention.heatmap(m)
    t = seg["turns"]
    assert reasoning.shape == observation.shape == (t, t)
    attention.draw_heatmap(m, tmp_path / "h.png")
    assert (tmp_path / "h.png").stat().st_size > 1000
    # Decay needs steps with 5 past turns or more: a long synthetic trajectory (each turn
    # a reasoning span, its step, and an observation).
    turns = 9
    long = {"n_tokens": 20 * turns, "turns": turns, "steps": [20 * i + 2 for i in range(turns)],
            "spans": [sp for i in range(turns) for sp in (
                {"start": 20 * i, "end": 20 * i + 10, "turn": i, "role": "reasoning"},
                {"start": 20 * i + 10, "end": 20 * i + 20, "turn": i, "role": "observation"})]}
    m2 = attention.mass(qk_layers(rng, 20 * turns), long)
    (tmp_path / "m2.json").write_text(json.dumps(m2))
    d = attention.decay([m2, tmp_path / "m2.json"], png=tmp_path / "d.png")
    cli("attention", "decay", str(tmp_path / "m2.json"), str(tmp_path / "m2.json"), "--json", str(tmp_path / "d.json"))
    assert d == json.loads((tmp_path / "d.json").read_text())
    assert d["steps"] == 2 * (turns - 5)
    assert (tmp_path / "d.png").stat().st_size > 1000
    # Over HTTP: the masses in the body.
    from conftest import ServeProcess

    with ServeProcess() as srv:
        st, body = srv.post("/v1/attention/decay", {"masses": [m2, m2]})
        assert st == 200 and body == d
        st, body = srv.post("/v1/attention/decay", {"masses": [{"steps": 3}]})
        assert st == 422 and body["error"].startswith("invalid masses: not a list of masses")


def test_probe_equals_the_cli(tmp_path):
    r = attention.probe(PROBE, PROBE / "labels.jsonl", tokenizer="approx", plot=tmp_path / "p.png")
    cli("probe", "--trajectories", str(PROBE), "--labels", str(PROBE / "labels.jsonl"), "--tokenizer", "approx",
        "--json", str(tmp_path / "p.json"))
    assert r == json.loads((tmp_path / "p.json").read_text())
    assert (tmp_path / "p.png").stat().st_size > 1000


def test_bad_inputs_name_the_argument(rng, seg):
    layers = qk_layers(rng, seg["n_tokens"])
    with pytest.raises(ctxprune.InvalidInputError, match=r"invalid layers\[1\]: heads"):
        attention.mass([layers[0], qk_layers(rng, seg["n_tokens"], heads=2)[0]], seg)
    with pytest.raises(ctxprune.InvalidInputError, match=r"invalid layers\[0\]: 3 positions"):
        attention.mass([(layers[0][0][:3], layers[0][1][:3])], seg)
    with pytest.raises(ctxprune.InvalidInputError, match="invalid tensors"):
        attention.mass(42, seg)
    with pytest.raises(ctxprune.InvalidInputError, match="invalid masses"):
        attention.decay({"steps": []})
    with pytest.raises(ctxprune.InvalidInputError, match="invalid search_tools"):
        attention.probe(PROBE, PROBE / "labels.jsonl", search_tools="search")
    with pytest.raises(ctxprune.FileError):
        attention.mass(layers, "/nonexistent/seg.json")
