#!/usr/bin/env python3
"""Writes the seed corpus of every fuzz target into corpus/<target>/ (stdlib only; run
from anywhere). Seeds are small valid files of each format plus the bad inputs of
tests/bad_inputs, laid out as each target reads its input (see the target's doc comment:
safetensors takes a name-length byte first, config_json a 4-byte context, oracle_response
a 2-byte n). Rerun after changing a target's input layout; the files are committed.
"""
import json
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
BAD = os.path.join(HERE, "..", "tests", "bad_inputs")
CORPUS = os.path.join(HERE, "corpus")


def npy(descr, shape, data, version=1, fortran=False, header=None):
    shape_s = "(%d,)" % shape[0] if len(shape) == 1 else "(" + ", ".join(map(str, shape)) + ")"
    h = header if header is not None else "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
        descr, "True" if fortran else "False", shape_s)
    pre = 10 if version == 1 else 12
    while (pre + len(h) + 1) % 64:
        h += " "
    h += "\n"
    size = struct.pack("<H", len(h)) if version == 1 else struct.pack("<I", len(h))
    return b"\x93NUMPY" + bytes([version, 0]) + size + h.encode() + data


def safetensors(tensors, metadata=None):
    """tensors: list of (name, dtype, shape, raw bytes)."""
    header, off, blob = {}, 0, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blob += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    while len(h) % 8:
        h += b" "
    return struct.pack("<Q", len(h)) + h + blob


def f16(x):
    return struct.pack("<e", x)


def bf16(x):
    return struct.pack("<f", x)[2:]


def jl(rows):
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def bad(name):
    with open(os.path.join(BAD, name), "rb") as f:
        return f.read()


CLEARED = set()


def write(target, name, data):
    # A target's folder is emptied the first time this run writes it; the folders of
    # targets whose seeds come from elsewhere (chat_prompt, qk_tensors) are left alone.
    d = os.path.join(CORPUS, target)
    # Each target's corpus written here is rewritten whole; the corpora of targets this
    # script does not write (chat_prompt, qk_tensors) are left as committed.
    if target not in CLEARED:
        shutil.rmtree(d, ignore_errors=True)
        CLEARED.add(target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def main():

    # npy: parse_embeddings (2-D floats) and parse_npy_f32 (any shape of floats).
    for n in ["pool.npy", "big.npy", "int.npy", "header_newlines.npy", "truncated.npy"]:
        write("npy", n, bad(n))
    write("npy", "f4_2x3.npy", npy("<f4", [2, 3], struct.pack("<6f", 1, 2, 3, 4, 5, 6)))
    write("npy", "f8_2x2.npy", npy("<f8", [2, 2], struct.pack("<4d", 1, 0.5, -2, 1e-3)))
    write("npy", "f2_3x2.npy", npy("<f2", [3, 2], b"".join(f16(x) for x in [1, 2, 3, 0.5, -1, 0])))
    write("npy", "be_f4_1x2.npy", npy(">f4", [1, 2], struct.pack(">2f", 1, 2)))
    write("npy", "v2_f4_1x2.npy", npy("<f4", [1, 2], struct.pack("<2f", 1, 2), version=2))
    write("npy", "v3_f4_1x2.npy", npy("<f4", [1, 2], struct.pack("<2f", 1, 2), version=3))
    write("npy", "f4_vec4.npy", npy("<f4", [4], struct.pack("<4f", 1, 0, 0, 0)))
    write("npy", "fortran_2x2.npy", npy("<f4", [2, 2], struct.pack("<4f", 1, 2, 3, 4), fortran=True))
    write("npy", "f4_0x3.npy", npy("<f4", [0, 3], b""))
    write("npy", "scalar.npy", npy("<f4", [], struct.pack("<f", 1), header="{'descr': '<f4', 'fortran_order': False, 'shape': (), }"))
    write("npy", "nan.npy", npy("<f4", [1, 2], struct.pack("<2f", float("nan"), 1)))
    write("npy", "u1_2x2.npy", npy("|u1", [2, 2], bytes([1, 2, 3, 4])))

    # safetensors: byte 0 is the tensor name's length (0xff: no name).
    emb = ("embeddings", "F32", [2, 3], struct.pack("<6f", 1, 2, 3, 4, 5, 6))
    write("safetensors", "one_f32", b"\xff" + safetensors([emb]))
    write("safetensors", "named_f32", b"\x0aembeddings" + safetensors([emb]))
    write("safetensors", "f64", b"\xff" + safetensors([("x", "F64", [2, 2], struct.pack("<4d", 1, 2, 3, 1e39))]))
    write("safetensors", "f16", b"\xff" + safetensors([("x", "F16", [2, 2], b"".join(f16(v) for v in [1, 2, 3, 4]))]))
    write("safetensors", "bf16", b"\x01b" + safetensors([("a", "F32", [1, 1], struct.pack("<f", 1)),
                                                            ("b", "BF16", [2, 2], b"".join(bf16(v) for v in [1, 2, 3, 4]))]))
    write("safetensors", "two_unnamed", b"\xff" + safetensors([("a", "F32", [1, 2], struct.pack("<2f", 1, 2)),
                                                              ("b", "F32", [1, 2], struct.pack("<2f", 3, 4))]))
    write("safetensors", "i32", b"\xff" + safetensors([("x", "I32", [2, 2], struct.pack("<4i", 1, 2, 3, 4))]))
    write("safetensors", "vec", b"\xff" + safetensors([("x", "F32", [4], struct.pack("<4f", 1, 2, 3, 4))]))
    write("safetensors", "meta", b"\x01x" + safetensors([("x", "F32", [1, 2], struct.pack("<2f", 1, 2))],
                                                        metadata={"format": "pt"}))

    # jsonl: embeddings rows, pool texts, arrays of numbers.
    for n in ["texts.jsonl", "tokens0.jsonl", "zero_row.jsonl", "q.json", "q3.json", "q_big.json",
              "costs_huge.json", "scores.json"]:
        write("jsonl", n, bad(n))
    write("jsonl", "rows_full.jsonl", jl([{"embedding": [1, 0, 0.5], "tokens": 12, "text": "alpha"},
                                          {"embedding": [0, 1, -0.25], "tokens": 7.5, "text": "beta"}]))
    write("jsonl", "rows_plain.jsonl", jl([{"embedding": [0.1, 0.2]}, {"embedding": [1e-30, 3e38]}]))
    write("jsonl", "bom_crlf.jsonl", b"\xef\xbb\xbf" + jl([{"embedding": [1, 2]}]).replace(b"\n", b"\r\n") + b"\r\n\r\n")
    write("jsonl", "texts_tokens.jsonl", jl([{"text": "a", "tokens": 3}, {"text": "b\u00e9\u4e16", "tokens": 1}]))
    write("jsonl", "numbers.json", b"[1, 2.5, -3e-7, 1e308, 0]")

    # messages_openai / messages_anthropic: trajectories.
    openai = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "find it"},
    ]
    for t in range(7):
        calls = [{"id": "c%d_%d" % (t, k), "type": "function",
                  "function": {"name": ["search", "open", "grep"][(t + k) % 3], "arguments": json.dumps({"q": t})}}
                 for k in range(1 + t % 2)]
        openai.append({"role": "assistant", "content": None, "tool_calls": calls})
        for c in calls:
            m = {"role": "tool", "tool_call_id": c["id"], "content": "line one\nline two %d\n" % t * (t + 1)}
            if t == 2:
                m["is_error"] = True
            openai.append(m)
    openai.append({"role": "assistant", "content": "done"})
    write("messages_openai", "seven_turns.json", json.dumps(openai))
    write("messages_openai", "object_messages.json", json.dumps({"model": "x", "messages": openai[:6], "extra": 1}))
    write("messages_openai", "two_answers.json", bad("openai_two_answers.json"))
    write("messages_openai", "parts.json", json.dumps([
        {"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": {"k": [1]}}}]},
        {"role": "tool", "tool_call_id": "a", "content": [{"type": "text", "text": "p1"}, {"type": "text", "text": "p2"}]},
        {"role": "assistant", "tool_calls": [{"id": "b", "function": {"name": "g"}}]},
        {"role": "tool", "tool_call_id": "b", "content": None}]))
    write("messages_openai", "unanswered.json", json.dumps([
        {"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"id": "z", "function": {"name": "f"}}]}]))

    anth = [{"role": "user", "content": "find it"}]
    for t in range(7):
        uses = [{"type": "tool_use", "id": "t%d_%d" % (t, k), "name": ["search", "open"][k % 2], "input": {"q": t}}
                for k in range(1 + t % 2)]
        anth.append({"role": "assistant", "content": [{"type": "text", "text": "thinking"}] + uses})
        results = []
        for u in uses:
            r = {"type": "tool_result", "tool_use_id": u["id"],
                 "content": [{"type": "text", "text": "result %d\nmore" % t}] if t % 2 else "plain %d" % t}
            if t == 3:
                r["is_error"] = True
            results.append(r)
        anth.append({"role": "user", "content": results})
    write("messages_anthropic", "seven_turns.json", json.dumps({"system": "s", "messages": anth}))
    write("messages_anthropic", "array.json", json.dumps(anth[:5]))
    write("messages_anthropic", "one_turn.json", bad("anthropic.json"))
    write("messages_anthropic", "same_message.json", bad("anthropic_same_message.json"))
    # Each format's files in the other's corpus too: formats get confused in practice.
    write("messages_anthropic", "openai.json", json.dumps(openai[:8]))
    write("messages_openai", "anthropic.json", json.dumps(anth[:5]))

    # config_json: 4-byte context (u32 LE), then the config.json text.
    def cfg(name, context, obj):
        text = obj if isinstance(obj, (bytes, str)) else json.dumps(obj)
        write("config_json", name, struct.pack("<I", context) + (text if isinstance(text, bytes) else text.encode()))

    cfg("ok", 4096, bad("config_ok.json"))
    cfg("kv", 1, bad("config_kv.json"))
    cfg("str", 100, bad("config_str.json"))
    cfg("llama", 131072, {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
                          "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
                          "hidden_act": "silu", "sliding_window": None})
    cfg("sliding", 1000000000, {"model_type": "gemma3_text", "num_hidden_layers": 4, "hidden_size": 256,
                                "intermediate_size": 1024, "num_attention_heads": 4, "num_key_value_heads": 1,
                                "hidden_activation": "gelu_pytorch_tanh", "sliding_window": 512,
                                "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention",
                                                "full_attention"]})
    cfg("moe", 0xFFFFFFFF, {"num_hidden_layers": 2, "hidden_size": 128, "intermediate_size": 512,
                            "moe_intermediate_size": 64, "num_experts_per_tok": 8, "num_attention_heads": 2,
                            "hidden_act": "gelu"})
    cfg("no_layer_types", 0, {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
                              "num_attention_heads": 4, "sliding_window": 4096, "use_sliding_window": False})
    cfg("bom_dup", 7, "\ufeff{\"num_hidden_layers\": 2, \"num_hidden_layers\": 3}")
    cfg("max", 1000000000, {"num_hidden_layers": 100000, "hidden_size": 1000000, "intermediate_size": 1000000,
                            "num_attention_heads": 1000000, "experts_per_token": 1000000})

    # oracle_response: 2-byte n (u16 LE), then the body (parsed as TEI and as Cohere).
    def resp(name, n, obj):
        write("oracle_response", name, struct.pack("<H", n) + json.dumps(obj).encode())

    resp("tei3", 3, [{"index": 2, "score": 0.1}, {"index": 0, "score": 0.9}, {"index": 1, "score": 0.5}])
    resp("cohere3", 3, {"id": "x", "results": [{"index": 1, "relevance_score": 0.25},
                                               {"index": 0, "relevance_score": 1},
                                               {"index": 2, "relevance_score": 0}]})
    resp("tei_repeat", 2, [{"index": 0, "score": 0.1}, {"index": 0, "score": 0.2}])
    resp("tei_range", 1, [{"index": 0, "score": 1.5}])
    resp("cohere_short", 4, {"results": [{"index": 3, "relevance_score": 0.5}]})
    resp("empty", 0, [])
    write("oracle_response", "scores", struct.pack("<H", 7) + bad("scores.json"))

    # request_body: a `ctxprune serve` body as sent; json_reader: any JSON text.
    import base64
    b64 = base64.b64encode(struct.pack("<6f", 1, 2, 3, 4, 5, 6)).decode()
    bodies = {
        "select.json": {"method": "mmr", "k": 2, "lambda": 0.5, "query": [1, 0, 0],
                        "embeddings": [[1, 0, 0], [0, 1, 0], [0.5, 0.5, 0]], "costs": [1, 2, 3],
                        "retained": [0], "texts": ["a", "b", "c"]},
        "base64.json": {"method": "dpp", "embeddings": {"base64": b64, "dtype": "f32", "shape": [2, 3]}},
        "mask.json": {"messages": [{"role": "user", "content": "hi"}], "keep_errors": True},
        "ragged.json": {"embeddings": [[1, 2], [3]]},
    }
    for name, body in bodies.items():
        write("request_body", name, json.dumps(body))
    write("request_body", "dup_nested.json", '{"embeddings": [[1]], "x": {"a": 1, "a": 2}}')
    write("request_body", "deep.json", '{"q": ' + "[" * 130 + "]" * 130 + "}")
    write("json_reader", "object.json", json.dumps(bodies["select.json"]))
    write("json_reader", "dup.json", '{"a": [{"k": 1, "\\u006b": 2}]}')
    write("json_reader", "bom.json", b"\xef\xbb\xbf[1, 2.5e-3, \"x\", null, true, {}]")
    write("json_reader", "big_int.json", '[123456789012345678901234567890, -9223372036854775809]')
    inputs_of_issue_23()


def inputs_of_issue_23():
    """Seeds of the attention, probe and pipeline targets: good files, and the hostile
    shapes the issue found (a repeated key, sizes past the bounds, masses near f64::MAX)."""
    data = os.path.join(HERE, "..", "tests", "data")

    # segmentation: the JSON of `attention segment`.
    spans = [{"start": 0, "end": 4, "turn": 0, "role": "system"},
             {"start": 4, "end": 8, "turn": 0, "role": "user"},
             {"start": 9, "end": 14, "turn": 0, "role": "reasoning"},
             {"start": 14, "end": 16, "turn": 0, "role": "tool_call"},
             {"start": 17, "end": 30, "turn": 1, "role": "observation"},
             {"start": 31, "end": 36, "turn": 1, "role": "reasoning"}]
    seg = {"n_tokens": 40, "turns": 2, "steps": [10, 32], "spans": spans}
    write("segmentation", "two_turns.json", json.dumps(seg))
    write("segmentation", "pretty.json", json.dumps(seg, indent=1))
    write("segmentation", "dup_role.json", json.dumps(seg).replace('"role": "system"', '"role": "user", "role": "system"', 1))
    write("segmentation", "turns_past_spans.json", json.dumps(dict(seg, turns=10 ** 15, spans=spans[:1] + [
        {"start": 36, "end": 40, "turn": 10 ** 15 - 1, "role": "reasoning"}], steps=[37])))
    write("segmentation", "step_outside.json", json.dumps(dict(seg, steps=[5])))

    # mass_json: the JSON of `attention mass --json` (`attention decay` reads them).
    def step(pos, turn, turns):
        s = [[0.0] * 5 for _ in range(turns)]
        for k in range(turn + 1):
            s[k][2] = 0.5 / (turn + 1)
            s[k][4] = 0.4 / (turn + 1)
        return {"pos": pos, "turn": turn, "s": s, "unassigned": 0.1, "spans": [0.5, 0.4]}

    turns = 7
    mass = {"turns": turns, "layers": 1, "heads": 2, "backend": "cpu",
            "steps": [step(10 * t + 5, t, turns) for t in range(turns)]}
    write("mass_json", "seven_turns.json", json.dumps(mass))
    huge = json.loads(json.dumps(mass))
    huge["steps"][6]["s"][0][2] = 1e308
    huge["steps"][6]["s"][1][2] = 1e308
    write("mass_json", "near_max.json", json.dumps(huge))
    write("mass_json", "dup_turn.json", json.dumps(mass).replace('"turn": 3', '"turn": 0, "turn": 3', 1))
    write("mass_json", "short_rows.json", json.dumps(dict(mass, turns=9)))

    # probe_labels: labels.jsonl.
    with open(os.path.join(data, "probe", "queries", "labels.jsonl"), "rb") as f:
        write("probe_labels", "queries.jsonl", f.read())
    write("probe_labels", "urls.jsonl", jl([
        {"id": "a", "trajectory": "a.json", "rescued": True, "gold": ["https://X.com/1#f"], "cited": None},
        {"id": "b", "trajectory": "sub/b.json", "rescued": False, "cited": ["http://y.org/p?q=1"]}]))
    write("probe_labels", "dup_rescued.jsonl",
          b'{"id": "a", "trajectory": "a.json", "rescued": true, "rescued": false}\n')

    # probe_trajectory: No-CM trajectories in both formats.
    for name in ["openai_small.json", "anthropic_small.json"]:
        with open(os.path.join(data, "probe", name), "rb") as f:
            write("probe_trajectory", name, f.read())
    with open(os.path.join(data, "probe", "queries", "q03.json"), "rb") as f:
        q03 = f.read()
    write("probe_trajectory", "q03.json", q03)
    write("probe_trajectory", "dup_content.json", q03.replace(b'"content":', b'"content": 1, "content":', 1))

    # run_log: the logged research run of `ctxprune pipeline` (tests/pipeline_replay.rs).
    run = [
        {"type": "query", "text": "why do batteries fail", "embedding": [1, 2, 3, 4]},
        {"type": "subquery", "id": "s1", "parent": None, "depth": 0, "text": "anode", "tokens": 10,
         "embedding": [1, 0, 0, 0]},
        {"type": "item", "subquery": "s1", "text": "dendrites", "tokens": 100, "embedding": [1, 0, 0, 0]},
        {"type": "item", "subquery": "s1", "text": "resistance", "tokens": 60, "embedding": [0, 1, 0, 0]},
        {"type": "subquery", "id": "s1.1", "parent": "s1", "depth": 1, "text": "anode resistance",
         "tokens": 6, "embedding": [0, 1, 0, 0]},
        {"type": "item", "subquery": "s1.1", "text": "again", "tokens": 70, "embedding": [0, 1, 0, 0]},
        {"type": "subquery", "id": "s2", "parent": None, "depth": 0, "text": "cathode", "tokens": 12,
         "embedding": [0, 0, 1, 0]},
        {"type": "item", "subquery": "s2", "text": "coatings", "tokens": 50, "embedding": [0, 0, 0, 1]},
    ]
    write("run_log", "tree.jsonl", jl(run))
    write("run_log", "huge_tokens.jsonl", jl(run).replace(b'"tokens": 60', b'"tokens": 1e308', 1))
    write("run_log", "dup_tokens.jsonl", jl(run).replace(b'"tokens": 100', b'"tokens": 100, "tokens": 1', 1))
    write("run_log", "cycle.jsonl", jl(run).replace(b'"parent": null, "depth": 0, "text": "anode"',
                                                    b'"parent": "s1.1", "depth": 0, "text": "anode"', 1))

    # stages_toml: the per-stage policies of `ctxprune pipeline`.
    write("stages_toml", "three.toml", "max_nodes = 32\n\n[pre_retrieval]\npolicy = \"scorer\"\nmethod = \"grn\"\n"
          "mode = \"gate\"\nthreshold = 0.5\n\n[post_retrieval]\npolicy = \"scorer\"\nmethod = \"mmr\"\nk = 4\n"
          "lambda = 0.35\n\n[pre_synthesis]\npolicy = \"scorer\"\nmethod = \"dpp\"\nk = 3\n")
    write("stages_toml", "off.toml", "[pre_retrieval]\npolicy = \"off\"\n")
    write("stages_toml", "dup.toml", "[post_retrieval]\npolicy = \"scorer\"\nmethod = \"grn\"\nmethod = \"mmr\"\n")
    write("stages_toml", "controller.toml", "[pre_retrieval]\npolicy = \"controller\"\nweights = \"/dev/zero\"\n")

    # decisions: the decisions log of `ctxprune pipeline train`.
    rows = [{"run": "r%d" % (i % 3), "depth": i % 2, "order": i % 4, "retained": i,
             "state_embedding": [0.1 * i, 0.5], "candidate_embedding": [0.3, -0.2 * i], "keep": i % 2 == 0,
             "utility": 0.1 * i} for i in range(6)]
    write("decisions", "six.jsonl", jl(rows))
    write("decisions", "texts.jsonl", jl([{"run": "r1", "depth": 1, "order": 0, "query": "q",
                                           "retained_texts": ["a"], "candidate": "c", "keep": True}]))
    write("decisions", "dup_keep.jsonl", jl(rows[:2]).replace(b'"keep": true', b'"keep": true, "keep": false', 1))
    write("decisions", "ragged.jsonl", jl([rows[0], dict(rows[1], candidate_embedding=[1, 2, 3])]))


if __name__ == "__main__":
    main()
