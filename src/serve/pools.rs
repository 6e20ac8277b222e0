//! Named pools: uploaded once, resident on the engine's device, shared by requests, under
//! a cap on their total bytes.

use super::ApiError;
use crate::error::Error;
use crate::{Embeddings, Engine, Pool};
use axum::http::StatusCode;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};

/// The resident pools by name and their bytes.
pub struct Pools {
    cap: usize,
    map: RwLock<BTreeMap<String, Arc<Pool>>>,
    /// The start-up pools not yet resident.
    loading: RwLock<BTreeSet<String>>,
    /// Why a start-up pool failed to load (the server is stopping).
    failed: RwLock<Option<String>>,
}

/// A pool's resident bytes (f32 rows).
fn bytes(p: &Pool) -> usize {
    p.len().saturating_mul(p.dim()).saturating_mul(4)
}

fn check_name(name: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid("name", "a pool name is 1 to 64 of A-Z a-z 0-9 _ - .").into())
    }
}

impl Pools {
    /// No pools yet, at most `cap` bytes of them; `loading` are the start-up pools' names,
    /// loading until [`Pools::put`] makes each resident.
    #[must_use]
    pub fn new(cap: usize, loading: impl IntoIterator<Item = String>) -> Self {
        Pools {
            cap,
            map: RwLock::new(BTreeMap::new()),
            loading: RwLock::new(loading.into_iter().collect()),
            failed: RwLock::new(None),
        }
    }

    /// The start-up pools not yet resident, by name.
    pub fn loading(&self) -> Vec<String> {
        self.loading
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    /// Records that a start-up pool failed to load (`why`: the one-line error); the
    /// server is stopping, and is never ready again.
    pub fn fail(&self, why: String) {
        *self.failed.write().unwrap_or_else(|p| p.into_inner()) = Some(why);
    }

    /// Why a start-up pool failed to load, if one did.
    pub fn failure(&self) -> Option<String> {
        self.failed.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn is_loading(&self, name: &str) -> bool {
        self.loading
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains(name)
    }

    /// 409 when `name` is a start-up pool still loading: a request may not replace or
    /// remove it before it is resident (the loader would overwrite an upload).
    pub fn check_settled(&self, name: &str) -> Result<(), ApiError> {
        if self.is_loading(name) {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!("pool '{name}' is loading at start (--pool): it cannot be replaced or removed until it is resident"),
            ));
        }
        Ok(())
    }

    /// 503 (with `Retry-After`) for an upload while any start-up pool is still loading:
    /// the start-up pools have the first claim on `--max-pool-bytes`, so an upload made
    /// meanwhile can never leave a start-up pool over the cap (which would stop the
    /// server). 409 when `name` is itself one of them ([`Pools::check_settled`]).
    pub fn check_upload(&self, name: &str) -> Result<(), ApiError> {
        self.check_settled(name)?;
        let loading = self.loading();
        if loading.is_empty() {
            return Ok(());
        }
        let mut e = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "uploads wait until the start-up pools are resident (--pool; still loading: {}); GET /readyz says when",
                loading.join(", ")
            ),
        );
        e.retry_after = Some(1);
        Err(e)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<Pool>>> {
        self.map.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes resident now.
    pub fn total_bytes(&self) -> usize {
        self.read().values().map(|p| bytes(p)).sum()
    }

    /// Pools resident now.
    pub fn count(&self) -> usize {
        self.read().len()
    }

    /// The pool `name` (404 when there is none, 503 while it loads at start).
    pub fn get(&self, name: &str) -> Result<Arc<Pool>, ApiError> {
        self.read().get(name).cloned().ok_or_else(|| {
            if let Some(why) = self.failure() {
                return ApiError::new(StatusCode::SERVICE_UNAVAILABLE, format!("the server is stopping: {why}"));
            }
            if self.is_loading(name) {
                return ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("pool '{name}' is still loading at start (GET /readyz says when every pool is resident)"),
                );
            }
            ApiError::new(
                StatusCode::NOT_FOUND,
                format!("no pool named '{name}' (PUT /v1/pools/{name} first)"),
            )
        })
    }

    fn info(name: &str, p: &Pool) -> Value {
        json!({"name": name, "rows": p.len(), "dim": p.dim(), "bytes": bytes(p), "on_device": p.on_device()})
    }

    /// Makes `e` resident as `name`, replacing a pool of that name; 413 when the total
    /// would pass the cap (the numbers in the message).
    pub fn put(&self, engine: &Engine, name: &str, e: Embeddings) -> Result<Value, ApiError> {
        check_name(name)?;
        let need = e.rows().saturating_mul(e.dim()).saturating_mul(4);
        let over = |held: usize| {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "pool '{name}' of {need} bytes would bring resident pools to {} bytes, over --max-pool-bytes {}",
                    held.saturating_add(need),
                    self.cap
                ),
            )
        };
        // Checked before the rows are copied to the device, and again under the lock.
        let held_now = |m: &BTreeMap<String, Arc<Pool>>| {
            m.iter()
                .filter(|(k, _)| k.as_str() != name)
                .map(|(_, p)| bytes(p))
                .sum::<usize>()
        };
        let held = held_now(&self.read());
        if held.saturating_add(need) > self.cap {
            return Err(over(held));
        }
        let pool = Arc::new(Pool::new(engine, e)?);
        let mut m = self.map.write().unwrap_or_else(|p| p.into_inner());
        let held = held_now(&m);
        if held.saturating_add(need) > self.cap {
            return Err(over(held));
        }
        let info = Self::info(name, &pool);
        m.insert(name.to_string(), pool);
        drop(m);
        self.loading
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
        Ok(info)
    }

    /// The pool's description (404 when there is none).
    pub fn describe(&self, name: &str) -> Result<Value, ApiError> {
        let p = self.get(name)?;
        Ok(Self::info(name, &p))
    }

    /// Drops `name` (requests holding it finish first); 404 when there is none, 409
    /// while it loads at start.
    pub fn remove(&self, name: &str) -> Result<Value, ApiError> {
        self.check_settled(name)?;
        let mut m = self.map.write().unwrap_or_else(|p| p.into_inner());
        match m.remove(name) {
            Some(p) => Ok(json!({"removed": name, "bytes": bytes(&p)})),
            None => Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!("no pool named '{name}'"),
            )),
        }
    }

    /// Every pool's description and the totals.
    pub fn list(&self) -> Value {
        let m = self.read();
        let pools: Vec<Value> = m.iter().map(|(k, p)| Self::info(k, p)).collect();
        json!({"pools": pools, "bytes": m.values().map(|p| bytes(p)).sum::<usize>(), "max_bytes": self.cap})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_named_while_it_loads_is_503_and_resident_after() {
        let pools = Pools::new(1 << 30, ["late".to_string()]);
        assert_eq!(pools.loading(), ["late"]);
        let Err(e) = pools.get("late") else {
            panic!("still loading")
        };
        assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(e.msg.contains("still loading"), "{}", e.msg);
        assert_eq!(
            pools.get("other").map(|_| ()).expect_err("none").status,
            StatusCode::NOT_FOUND
        );
        let e = Embeddings::new(
            4,
            3,
            vec![1.0, 0.0, 0.5, 0.2, 1.0, 0.0, 0.0, 0.3, 1.0, 0.4, 0.4, 0.4],
            "late",
        )
        .expect("rows");
        pools.put(&Engine::cpu(), "late", e).expect("put");
        assert!(pools.loading().is_empty());
        assert!(pools.get("late").is_ok());
        // While "x" loads, a request may not replace or remove it; after a failure every
        // named pool is 503 naming it.
        let p = Pools::new(1 << 30, ["x".to_string()]);
        assert_eq!(
            p.check_settled("x").map_err(|e| e.status),
            Err(StatusCode::CONFLICT)
        );
        assert_eq!(
            p.remove("x").map(|_| ()).map_err(|e| e.status),
            Err(StatusCode::CONFLICT)
        );
        // Any other upload waits (503, Retry-After) until the start-up pools are in, so
        // it cannot take the bytes they need.
        let e = p.check_upload("y").expect_err("waits");
        assert_eq!(
            (e.status, e.retry_after),
            (StatusCode::SERVICE_UNAVAILABLE, Some(1))
        );
        assert!(e.msg.contains("still loading: x"), "{}", e.msg);
        assert_eq!(
            p.check_upload("x").map_err(|e| e.status),
            Err(StatusCode::CONFLICT)
        );
        assert!(pools.check_upload("y").is_ok());
        p.fail("pool 'x' (x.npy): not a valid .npy file".into());
        let Err(e) = p.get("late") else { panic!("stopping") };
        assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(e.msg.contains("x.npy"), "{}", e.msg);
    }
}
