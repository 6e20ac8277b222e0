"""Writes tests/data/probe/queries/: twelve small No-CM trajectories (OpenAI messages) and
labels.jsonl for the `ctxprune probe` CLI test. Deterministic: rerun it to regenerate.

Non-rescued queries are short and find their gold pages early (high SNR); rescued ones
are long and mostly see noise pages (low SNR, high complexity), as §5.2 describes. q07
ends with a search call that is never answered (the run was cut off: no final answer),
so it has 7 tool-observation turns, not 8, and the unanswered turn is reported. q12
makes no tool call (skipped), and extra.json is a trajectory no label names.
"""
import json, os

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "queries")
os.makedirs(HERE, exist_ok=True)

# id -> (turns, rescued)
QUERIES = {
    "q01": (2, False), "q02": (3, False), "q03": (3, False), "q04": (4, False),
    "q05": (5, False), "q06": (6, False), "q07": (7, False),
    "q08": (9, True), "q09": (10, True), "q10": (12, True), "q11": (14, True),
}

def trajectory(qid, turns, rescued):
    gold = [f"https://gold.example/{qid}/{k}" for k in (1, 2)]
    msgs = [{"role": "user", "content": f"Question {qid}?"}]
    seen = []
    for t in range(1, turns + 1):
        cid = f"{qid}-c{t}"
        if t % 2 == 1:
            # A search: three result URLs; gold among them early for non-rescued queries.
            urls = [f"https://noise.example/{qid}/{t}/{j}" for j in range(3)]
            if (not rescued and t <= 3) or (rescued and t == turns - (turns % 2 == 0)):
                urls[0] = gold[(t // 2) % 2]
            body = "\n".join(f"[{j}] result {j} for {qid} - {u}" for j, u in enumerate(urls))
            body += "\n" + "filler words " * (5 + 3 * t)
            if qid == "q03" and t == 1:
                body += "\nsee http:// (a dead link: reported, not used)"
            call = {"name": "search", "arguments": json.dumps({"query": f"{qid} step {t}"})}
            seen += urls
        else:
            url = seen[(t * 7) % len(seen)]
            body = f"Page {url}\n" + "page text " * (20 + 11 * t * (2 if rescued else 1))
            call = {"name": "open", "arguments": json.dumps({"url": url})}
        msgs.append({"role": "assistant", "content": None,
                     "tool_calls": [{"id": cid, "type": "function", "function": call}]})
        msgs.append({"role": "tool", "tool_call_id": cid, "content": body})
    if qid == "q07":
        # Cut off while waiting for a search: a tool call with no answer, no final answer.
        call = {"name": "search", "arguments": json.dumps({"query": f"{qid} one more"})}
        msgs.append({"role": "assistant", "content": None,
                     "tool_calls": [{"id": f"{qid}-cut", "type": "function", "function": call}]})
    else:
        msgs.append({"role": "assistant", "content": f"Final answer for {qid}, see {gold[0]}."})
    return {"messages": msgs}, gold

labels = []
for qid, (turns, rescued) in QUERIES.items():
    doc, gold = trajectory(qid, turns, rescued)
    with open(os.path.join(HERE, f"{qid}.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    labels.append({"id": qid, "trajectory": f"{qid}.json", "gold": gold, "rescued": rescued})

# No tool call: skipped, and reported.
with open(os.path.join(HERE, "q12.json"), "w") as f:
    json.dump([{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "No idea."}], f)
    f.write("\n")
labels.append({"id": "q12", "trajectory": "q12.json", "rescued": False})

# A trajectory no label names: reported, not an error.
with open(os.path.join(HERE, "extra.json"), "w") as f:
    doc, _ = trajectory("extra", 2, False)
    json.dump(doc, f)
    f.write("\n")

with open(os.path.join(HERE, "labels.jsonl"), "w") as f:
    for l in labels:
        f.write(json.dumps(l) + "\n")
