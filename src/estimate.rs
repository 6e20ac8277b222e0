//! What a call will cost, from its sizes alone, before it runs: arithmetic operations and
//! bytes of memory. A service compares these with its limits to refuse a request that
//! would hold a core for minutes or take gigabytes ([`crate::serve`]'s `max_work` and
//! `max_request_memory`), rather than start it and time it out.
//!
//! The estimates are upper bounds of the dominant terms, not predictions: each
//! selector's greedy step is counted as a full pass over its candidates even where the
//! lazy heap refreshes a few, and memory counts every buffer the path allocates at its
//! peak. The formulas are beside their algorithms: [`crate::select::SelectConfig::estimate`]
//! and [`crate::rerank::RerankConfig::estimate`]; this module holds the type and the
//! costs shared by every request (a pool, a parsed JSON body).

use crate::io::json::Scan;

/// Operations and bytes of one call.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Estimate {
    /// Arithmetic operations (a multiply-add counts two), and comparisons where a step
    /// sorts or selects.
    pub ops: f64,
    /// Peak bytes of memory the call allocates.
    pub bytes: f64,
}

impl std::ops::Add for Estimate {
    type Output = Estimate;
    fn add(self, o: Estimate) -> Estimate {
        Estimate {
            ops: self.ops + o.ops,
            bytes: self.bytes + o.bytes,
        }
    }
}

/// Bytes of one parsed JSON value (a `serde_json::Value` with this crate's features),
/// without its heap parts.
pub const JSON_VALUE_BYTES: f64 = std::mem::size_of::<serde_json::Value>() as f64;

/// Making a pool of `n` rows of `d` dimensions: the rows as f32, a normalised copy, and
/// the inverse norms; one pass to normalise.
#[must_use]
pub fn pool(n: usize, d: usize) -> Estimate {
    let (n, d) = (n as f64, d as f64);
    Estimate {
        ops: 3.0 * n * d,
        bytes: 2.0 * 4.0 * n * d + 8.0 * n,
    }
}

/// Parsing a JSON text that [`crate::io::json::scan`] described into values: each value,
/// each string's bytes and a map entry per value at most (a bound: arrays hold no keys).
#[must_use]
pub fn json(scan: &Scan) -> Estimate {
    let values = scan.values as f64;
    Estimate {
        ops: values + scan.string_bytes as f64,
        bytes: values * (JSON_VALUE_BYTES + 16.0) + 2.0 * scan.string_bytes as f64,
    }
}

/// Reading a JSON text that [`crate::io::json::scan`] described straight into typed
/// values (numbers into vectors, strings into strings), as a request body's fields are:
/// a number or scalar 8 bytes, a string its bytes and its allocation.
#[must_use]
pub fn typed(scan: &Scan) -> Estimate {
    Estimate {
        ops: scan.values as f64 + scan.string_bytes as f64,
        bytes: 8.0 * scan.values as f64 + 48.0 * scan.strings as f64 + scan.string_bytes as f64,
    }
}

/// `b` bytes in words: "512 B", "3.2 MiB", "7.5 GiB".
#[must_use]
pub fn bytes_text(b: f64) -> String {
    const KI: f64 = 1024.0;
    if b < KI {
        format!("{b:.0} B")
    } else if b < KI * KI {
        format!("{:.1} KiB", b / KI)
    } else if b < KI * KI * KI {
        format!("{:.1} MiB", b / (KI * KI))
    } else {
        format!("{:.1} GiB", b / (KI * KI * KI))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_and_words() {
        let a = pool(10, 3)
            + json(&Scan {
                values: 4,
                strings: 1,
                string_bytes: 10,
                depth: 2,
            });
        assert_eq!(a.ops, 90.0 + 14.0);
        assert_eq!(bytes_text(100.0), "100 B");
        assert_eq!(bytes_text(3.5 * 1024.0 * 1024.0), "3.5 MiB");
        assert_eq!(bytes_text(2.0 * 1024.0 * 1024.0 * 1024.0), "2.0 GiB");
    }
}
