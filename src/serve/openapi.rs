//! `GET /openapi.json`: the OpenAPI 3 document of the routes in `super::router`, written
//! by hand beside them (a test checks every route is in it and the other way round).

use serde_json::{json, Value};

fn num() -> Value {
    json!({"type": "number"})
}
fn count() -> Value {
    json!({"type": "integer", "minimum": 0})
}
fn string() -> Value {
    json!({"type": "string"})
}
fn strings() -> Value {
    json!({"type": "array", "items": {"type": "string"}})
}
fn nums() -> Value {
    json!({"type": "array", "items": {"type": "number"}})
}
/// A tokenizer's name: o200k_base, cl100k_base, approx, or one loaded with `--tokenizer`.
fn tokenizer() -> Value {
    json!({"type": "string", "description": "o200k_base, cl100k_base, approx, or the NAME of a serve --tokenizer NAME=FILE"})
}
fn enumerated(values: &[&str]) -> Value {
    json!({"type": "string", "enum": values})
}

/// A request body object with these properties (`required` among them).
fn body(props: Value, required: &[&str]) -> Value {
    json!({"required": true, "content": {"application/json": {"schema": {
        "type": "object", "properties": props, "required": required, "additionalProperties": false
    }}}})
}

fn ok(schema: Value) -> Value {
    json!({"description": "OK", "content": {"application/json": {"schema": schema}}})
}

/// The error responses every JSON endpoint may give, and `200` with `schema`.
fn responses(schema: Value, extra: &[&str]) -> Value {
    let mut r = json!({"200": ok(schema)});
    let err = |d: &str| json!({"description": d, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}});
    for code in ["400", "408", "413", "422", "503", "504"].iter().chain(extra) {
        let d = match *code {
            "400" => "The body is not one JSON object (not JSON, a key repeated anywhere, nesting past 128 levels)",
            "404" => "No pool of that name",
            "409" => "The pool is loading at start (serve --pool) and cannot be replaced or removed until it is resident",
            "408" => "The body did not arrive within the server's body timeout",
            "413" => "The body, the resident pools, or the request's estimated memory would pass the server's cap",
            "422" => "A value is out of range, a field unknown, an option does not apply, or the estimated work passes the server's cap",
            "502" => "The oracle upstream failed",
            "503" => "Every compute permit is taken (see Retry-After), the device failed, a named pool is still loading at start (serve --pool), or an upload waits for the start-up pools (see Retry-After)",
            _ => "The request passed the server's timeout",
        };
        r[*code] = err(d);
    }
    r
}

fn embeddings() -> Value {
    json!({"oneOf": [
        {"type": "array", "items": {"type": "array", "items": {"type": "number"}}, "description": "rows"},
        {"type": "object", "additionalProperties": false, "required": ["base64", "shape"], "properties": {
            "base64": {"type": "string", "description": "little-endian values, row after row"},
            "dtype": {"type": "string", "enum": ["f32", "f16"]},
            "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 2, "maxItems": 2}
        }}
    ]})
}

fn any_object() -> Value {
    json!({"type": "object"})
}

/// The document.
#[must_use]
pub fn document() -> Value {
    let select = body(
        json!({
            "method": enumerated(&["mmr", "grn", "centroid", "dpp", "coverage", "hybrid", "lexical"]),
            "mode": enumerated(&["greedy", "gate"]),
            "preset": enumerated(&["paper"]),
            "pool": string(), "embeddings": embeddings(), "query": nums(),
            "queries": embeddings(),
            "k": count(), "token_budget": num(), "threshold": num(), "lambda": num(), "weights": nums(),
            "costs": nums(), "retained": {"type": "array", "items": count()},
            "texts": strings(), "query_text": string(), "model": string(),
            "tokenizer": tokenizer(),
        }),
        &["method"],
    );
    let rerank = body(
        json!({
            "method": enumerated(&["boundary-morph", "bagel", "single-stage", "rgs", "rgs-simple", "auto"]),
            "pool": string(), "embeddings": embeddings(), "query": nums(),
            "budget": count(), "capacity": count(),
            "kernel": enumerated(&["vmf", "cosine", "rbf", "matern52"]), "kappa": num(),
            "prior": enumerated(&["mips", "zero", "adaptive", "score", "feedback"]), "acquisition": enumerated(&["boundary", "ucb"]),
            "beta0": num(), "graph_degree": count(), "seed_div": num(), "frac": num(),
            "batch": count(), "token_capacity": count(), "tokens": nums(), "prior_probes": count(),
            "row_precision": enumerated(&["f32", "bf16", "f16"]),
            "hyperparameters": enumerated(&["paper", "evidence"]),
            "feedback_neighbours": json!({"type": "number", "minimum": 0, "maximum": 1,
                "description": "with prior feedback: the share of the prior from the neighbourhoods of the documents scored at least 0.5 (auto: 0.3)"}),
            "oracle_scores": nums(), "oracle_url": string(), "oracle_api": enumerated(&["tei", "cohere"]),
            "oracle_timeout": num(), "texts": strings(), "query_text": string(), "model": string(),
            "tokenizer": tokenizer(),
        }),
        &["budget", "capacity"],
    );
    let mask = body(
        json!({
            "messages": {"oneOf": [{"type": "array", "items": any_object()}, any_object()]},
            "format": enumerated(&["auto", "openai", "anthropic"]),
            "window": count(), "keep_errors": {"type": "boolean"}, "keep_first": {"type": "boolean"},
            "tools_keep": strings(), "tools_mask": strings(), "trigger_tokens": count(),
            "clear_at_least": count(), "step": count(), "placeholder": string(),
            "preset": enumerated(&["paper", "swe-agent", "anthropic"]),
            "edit": any_object(), "unit": enumerated(&["turns", "tool_uses"]),
            "anchor": enumerated(&["window", "start"]), "hold": {"type": "boolean"},
            "clear_tool_inputs": {"type": "boolean"},
            "tokenizer": tokenizer(),
            "model": string(),
            "semantic_method": enumerated(&["grn", "mmr", "centroid", "dpp", "coverage"]),
            "semantic_tau": num(), "query_text": string(),
        }),
        &["messages"],
    );
    let embed = body(
        json!({"texts": strings(), "model": string(), "encoding": enumerated(&["float", "base64"])}),
        &["texts"],
    );
    let embedded = json!({"type": "object", "required": ["model", "dim", "rows", "embeddings"], "properties": {
        "model": string(), "dim": count(), "rows": count(), "embeddings": embeddings()}});
    let decay = body(
        json!({"masses": {"type": "array", "items": any_object()}}),
        &["masses"],
    );
    let segment = body(
        json!({"prompt": string(), "tokenizer": string(), "template": enumerated(&["qwen"])}),
        &["prompt"],
    );
    let segmentation = json!({"type": "object", "required": ["n_tokens", "turns", "steps", "spans"], "properties": {
        "n_tokens": count(), "turns": count(), "steps": {"type": "array", "items": count()},
        "spans": {"type": "array", "items": any_object()}}});
    let labelled = json!({"type": "object", "required": ["id", "trajectory", "rescued"], "additionalProperties": false,
        "properties": {"id": string(), "trajectory": {"oneOf": [{"type": "array", "items": any_object()}, any_object()]},
            "rescued": {"type": "boolean"},
            "gold": {"type": ["array", "null"], "items": string()}, "cited": {"type": ["array", "null"], "items": string()}}});
    let probe = body(
        json!({"queries": {"type": "array", "items": labelled}, "prefixes": count(), "folds": count(),
               "seed": count(), "search_tools": strings(), "open_tools": strings(), "tokenizer": tokenizer()}),
        &["queries"],
    );
    let models = json!({"type": "object", "required": ["models"], "properties": {"models": {"type": "array",
        "items": {"type": "object", "properties": {"name": string(), "dim": count(), "max_seq_length": count(),
            "normalize": {"type": "boolean"}, "pooling": strings()}}}}});
    let flops = body(
        json!({
            "config": any_object(), "layers": count(), "hidden": count(), "ffn": count(),
            "q_heads": count(), "kv_heads": count(), "experts_active": count(),
            "activation": enumerated(&["swiglu", "gelu"]), "context": count(),
            "sliding_layers": count(), "window": count(),
        }),
        &[],
    );
    let etc = body(
        json!({"input_noncached": num(), "input_cached": num(), "output": num(), "alpha": num(), "beta": num()}),
        &["input_noncached", "input_cached", "output"],
    );
    let plan = body(
        json!({"depth": count(), "window": count(), "stride": count()}),
        &["depth"],
    );
    let pool_put = body(json!({"embeddings": embeddings()}), &["embeddings"]);
    let name = json!([{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}]);
    let pool_info = json!({"type": "object", "properties": {
        "name": string(), "rows": count(), "dim": count(), "bytes": count(), "on_device": {"type": "boolean"}}});
    let selection = json!({"type": "object", "required": ["method", "mode", "selected", "gains", "backend"], "properties": {
        "method": string(), "mode": string(), "selected": {"type": "array", "items": count()}, "gains": nums(),
        "backend": string(), "elapsed_ms": num(), "stopped_by": string(), "threshold": num(), "tokens": num(),
        "notes": strings()}});
    // With "queries" in the body: one selection per query.
    let selection = json!({"oneOf": [selection, {"type": "object", "required": ["results"], "properties": {
        "results": {"type": "array", "items": selection}, "elapsed_ms": num()}}]});
    let reranked = json!({"type": "object", "required": ["selected", "scored", "scores"], "properties": {
        "method": string(), "selected": {"type": "array", "items": count()}, "scored": {"type": "array", "items": count()},
        "oracle_calls": count(), "oracle_rounds": count(), "scores": nums(), "notes": strings(),
        "kappa": {"type": ["number", "null"]}, "prior_alpha": {"type": ["number", "null"]},
        "tokens": {"type": ["integer", "null"], "minimum": 0},
        "hyperparameters": {"type": ["object", "null"], "properties": {
            "log_bandwidth": num(), "signal": num(), "noise": num(), "scale": num(), "offset": num()}},
        "backend": string(), "elapsed_ms": num(), "oracle_ms": num()}});
    let op =
        |summary: &str, b: Value, r: Value| json!({"summary": summary, "requestBody": b, "responses": r});
    json!({
        "openapi": "3.1.0",
        "info": {"title": "ctxprune", "version": env!("CARGO_PKG_VERSION"),
                 "description": "Marginal-value selection, budgeted reranking, observation masking and token cost over HTTP."},
        "paths": {
            "/v1/select": {"post": op("Select by marginal value (ctxprune select)", select, responses(selection, &["404"]))},
            "/v1/rerank": {"post": op("Budgeted top-k with a limited oracle (ctxprune rerank)", rerank, responses(reranked, &["404", "502"]))},
            "/v1/mask": {"post": op("Mask stale tool observations (ctxprune mask)", mask,
                responses(json!({"type": "object", "properties": {"messages": {}, "stats": any_object()}}), &[]))},
            "/v1/embed": {"post": op("Embed texts with a model loaded at start (ctxprune embed)", embed, responses(embedded, &[]))},
            "/v1/attention/decay": {"post": op("Decay curves over attention masses (ctxprune attention decay)", decay,
                responses(json!({"type": "object", "properties": {"edges": nums(), "steps": count(), "roles": {"type": "array"}}}), &[]))},
            "/v1/attention/segment": {"post": op("Cut a rendered prompt into (turn, role) token spans (ctxprune attention segment)", segment,
                responses(segmentation, &[]))},
            "/v1/probe": {"post": op("The SNR probe over labelled trajectories given inline (ctxprune probe --json)", probe,
                responses(any_object(), &[]))},
            "/v1/models": {"get": {"summary": "The sentence encoders this server loaded (--model)", "responses": {"200": ok(models)}}},
            "/v1/cost/flops": {"post": op("FLOPs per decoded token", flops,
                responses(json!({"type": "object", "properties": {"gflops_per_token": num(), "per_layer": nums()}}), &[]))},
            "/v1/cost/etc": {"post": op("Effective token cost", etc, responses(json!({"type": "object", "properties": {"etc": num()}}), &[]))},
            "/v1/cost/plan": {"post": op("Listwise window plan", plan,
                responses(json!({"type": "object", "properties": {"windows": {"type": "array"}, "duplication": num()}}), &[]))},
            "/v1/pools": {"get": {"summary": "Resident pools", "responses": {"200": ok(any_object())}}},
            "/v1/pools/{name}": {
                "put": {"summary": "Upload a pool (made resident once)", "parameters": name, "requestBody": pool_put,
                        "responses": responses(pool_info.clone(), &["409"])},
                "get": {"summary": "Describe a pool", "parameters": name,
                        "responses": {"200": ok(pool_info), "404": {"description": "No pool of that name",
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}}},
                "delete": {"summary": "Drop a pool", "parameters": name,
                        "responses": {"200": ok(any_object()), "404": {"description": "No pool of that name",
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
                            "409": {"description": "The pool is loading at start (serve --pool)",
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}}}
            },
            "/healthz": {"get": {"summary": "Liveness", "responses": {"200": ok(any_object())}}},
            "/readyz": {"get": {"summary": "Readiness: the engine is open and self-tested, and every start-up pool (serve --pool) is resident",
                "responses": {"200": ok(any_object()), "503": {"description": "Start-up pools still loading (\"loading\" names them)",
                    "content": {"application/json": {"schema": any_object()}}}}}},
            "/metrics": {"get": {"summary": "Prometheus metrics", "responses": {"200": {"description": "OK",
                "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
            "/openapi.json": {"get": {"summary": "This document", "responses": {"200": ok(any_object())}}}
        },
        "components": {"schemas": {"Error": {"type": "object", "required": ["error"], "properties": {"error": string()}}}}
    })
}

/// The `(method, path)` pairs the document lists.
#[must_use]
pub fn operations() -> Vec<(String, String)> {
    let d = document();
    let mut out = Vec::new();
    if let Some(paths) = d["paths"].as_object() {
        for (p, ops) in paths {
            for m in ops.as_object().into_iter().flat_map(|o| o.keys()) {
                out.push((m.to_uppercase(), p.clone()));
            }
        }
    }
    out
}
