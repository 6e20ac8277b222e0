#!/usr/bin/env python3
"""Writes the bad inputs of tests/cli_bad_inputs.rs (run from this directory; stdlib only).

Every file here is something a careless or hostile user hands the CLI; cases.tsv says
what each command must answer. The good files (pool.npy, q.json, ...) exist so that each
case has exactly one thing wrong.
"""
import json
import os
import struct


def npy(descr, shape, data, header=None):
    """A .npy of format 1.0; `header` replaces the header dict text when given."""
    shape_s = "(%d,)" % shape[0] if len(shape) == 1 else "(" + ", ".join(map(str, shape)) + ")"
    h = header if header is not None else "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape_s)
    while (10 + len(h) + 1) % 64:
        h += " "
    h += "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + data


def write(name, data):
    with open(name, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# Good inputs: a 7 x 4 pool, a query, texts, scores.
rows = [[1, 0, 0, 0], [0.9, 0.1, 0, 0], [0, 1, 0, 0], [0, 0.8, 0.2, 0], [0, 0, 1, 0], [0, 0, 0, 1], [0.5, 0.5, 0.5, 0.5]]
write("pool.npy", npy("<f4", [7, 4], b"".join(struct.pack("<4f", *r) for r in rows)))
write("q.json", json.dumps([1.0, 0.2, 0.1, 0.0]))
write("texts.jsonl", "".join(json.dumps({"text": "doc %d" % i}) + "\n" for i in range(7)))
write("scores.json", json.dumps([0.9, 0.8, 0.1, 0.2, 0.3, 0.4, 0.5]))
write("config_ok.json", json.dumps({"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
                                    "num_attention_heads": 4}))

# Bad inputs.
for link in ["urandom.jsonl", "urandom.json"]:
    if not os.path.lexists(link):
        os.symlink("/dev/urandom", link)
write("header_newlines.npy", npy("<f4", [1, 2], b"\0" * 8,
                                 header="{'descr': '<f4',\n 'fortran_order': Maybe,\n 'shape': (1, 2), }"))
write("truncated.npy", npy("<f4", [1000, 4], b"\0" * 16))
write("int.npy", npy("<i4", [2, 2], struct.pack("<4i", 1, 2, 3, 4)))
write("big.npy", npy("<f8", [2, 2], struct.pack("<4d", 1.0, 1e39, 0.5, 0.5)))
write("zero_row.jsonl", json.dumps({"embedding": [1, 0]}) + "\n" + json.dumps({"embedding": [0, 0]}) + "\n")
write("tokens0.jsonl", json.dumps({"embedding": [1, 0], "tokens": 3}) + "\n"
      + json.dumps({"embedding": [0, 1], "tokens": 0}) + "\n")
write("noext", "[1, 2]")
write("q3.json", json.dumps([1.0, 0.0, 0.0]))
write("q_big.json", json.dumps([1.0, 1e39, 0.0, 0.0]))
write("costs_huge.json", json.dumps([1.7e308] * 7))
write("config_str.json", json.dumps({"num_hidden_layers": "24", "hidden_size": 64, "intermediate_size": 128,
                                     "num_attention_heads": 4}))
write("config_kv.json", json.dumps({"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
                                    "num_attention_heads": 16, "num_key_value_heads": 32}))
write("anthropic_same_message.json", json.dumps({"messages": [{"role": "assistant", "content": [
    {"type": "tool_use", "id": "t1", "name": "f", "input": {}},
    {"type": "tool_result", "tool_use_id": "t1", "content": "r"}]}]}))
write("anthropic.json", json.dumps({"messages": [
    {"role": "user", "content": "find it"},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "search", "input": {"q": "x"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "found"}]}]}))
write("openai_two_answers.json", json.dumps([
    {"role": "user", "content": "find it"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "first"},
    {"role": "tool", "tool_call_id": "c1", "content": "second"}]))
