//! `/metrics` in the Prometheus text format: requests, errors and a latency histogram per
//! endpoint; the backend; resident pools and their bytes.

use super::Pools;
use crate::Engine;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;

/// Latency bucket bounds, in seconds.
const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

#[derive(Default, Clone)]
struct Route {
    requests: u64,
    errors: u64,
    sum_s: f64,
    buckets: [u64; BUCKETS.len()],
}

/// Counts per (method, route).
#[derive(Default)]
pub struct Metrics {
    routes: Mutex<BTreeMap<(String, String), Route>>,
}

impl Metrics {
    /// Counts one request.
    pub fn record(&self, method: &str, route: &str, status: u16, ms: f64) {
        let mut m = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        let r = m.entry((method.to_string(), route.to_string())).or_default();
        r.requests += 1;
        if status >= 400 {
            r.errors += 1;
        }
        let s = ms / 1e3;
        r.sum_s += s;
        for (b, &le) in r.buckets.iter_mut().zip(&BUCKETS) {
            if s <= le {
                *b += 1;
            }
        }
    }

    /// The text exposition; `running` and `waiting` are the compute slots' work now.
    pub fn render(&self, engine: &Engine, pools: &Pools, running: usize, waiting: usize) -> String {
        let m = self.routes.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut o = String::new();
        let _ = writeln!(
            o,
            "# HELP ctxprune_requests_total Requests answered, by method and route."
        );
        let _ = writeln!(o, "# TYPE ctxprune_requests_total counter");
        for ((meth, route), r) in &m {
            let _ = writeln!(
                o,
                "ctxprune_requests_total{{method=\"{meth}\",route=\"{route}\"}} {}",
                r.requests
            );
        }
        let _ = writeln!(
            o,
            "# HELP ctxprune_errors_total Responses with status >= 400, by method and route."
        );
        let _ = writeln!(o, "# TYPE ctxprune_errors_total counter");
        for ((meth, route), r) in &m {
            let _ = writeln!(
                o,
                "ctxprune_errors_total{{method=\"{meth}\",route=\"{route}\"}} {}",
                r.errors
            );
        }
        let _ = writeln!(
            o,
            "# HELP ctxprune_request_seconds Time to answer, by method and route."
        );
        let _ = writeln!(o, "# TYPE ctxprune_request_seconds histogram");
        for ((meth, route), r) in &m {
            let l = format!("method=\"{meth}\",route=\"{route}\"");
            for (b, le) in r.buckets.iter().zip(BUCKETS) {
                let _ = writeln!(o, "ctxprune_request_seconds_bucket{{{l},le=\"{le}\"}} {b}");
            }
            let _ = writeln!(
                o,
                "ctxprune_request_seconds_bucket{{{l},le=\"+Inf\"}} {}",
                r.requests
            );
            let _ = writeln!(o, "ctxprune_request_seconds_sum{{{l}}} {}", r.sum_s);
            let _ = writeln!(o, "ctxprune_request_seconds_count{{{l}}} {}", r.requests);
        }
        let _ = writeln!(o, "# HELP ctxprune_backend_info The engine's backend.");
        let _ = writeln!(o, "# TYPE ctxprune_backend_info gauge");
        let _ = writeln!(o, "ctxprune_backend_info{{backend=\"{}\"}} 1", engine.name());
        let _ = writeln!(o, "# HELP ctxprune_pools Named pools resident.");
        let _ = writeln!(o, "# TYPE ctxprune_pools gauge");
        let _ = writeln!(o, "ctxprune_pools {}", pools.count());
        let _ = writeln!(o, "# HELP ctxprune_pool_bytes Bytes of named pools resident.");
        let _ = writeln!(o, "# TYPE ctxprune_pool_bytes gauge");
        let _ = writeln!(o, "ctxprune_pool_bytes {}", pools.total_bytes());
        let _ = writeln!(
            o,
            "# HELP ctxprune_work_running Requests' work running in the compute slots now."
        );
        let _ = writeln!(o, "# TYPE ctxprune_work_running gauge");
        let _ = writeln!(o, "ctxprune_work_running {running}");
        let _ = writeln!(
            o,
            "# HELP ctxprune_requests_waiting Requests waiting for a compute slot now."
        );
        let _ = writeln!(o, "# TYPE ctxprune_requests_waiting gauge");
        let _ = writeln!(o, "ctxprune_requests_waiting {waiting}");
        o
    }
}
