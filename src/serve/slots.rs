//! Compute slots: where a request's work runs, and how much of the machine it may take.
//!
//! There are `max_concurrent` slots, each with its own thread pool of
//! `threads / max_concurrent` threads (at least one), so one request's parallel work (a
//! Gram block, a GEMM, a greedy step's refresh) runs on its slot's threads only and never
//! takes the threads another slot's request is using. A request waits for a free slot in
//! a bounded queue (503 with `Retry-After` when it is full), within its deadline.
//!
//! The work gets a [`Cancel`] with the request's deadline, and the request's future holds
//! a guard that cancels it when dropped (the client went away, or the shutdown's grace
//! period ended). Work checks it between steps and oracle calls, so a request past its
//! deadline stops within one step: its slot and threads are free again, rather than
//! running on after its 504 was sent.

use crate::cancel::Cancel;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// The slots and their queue.
pub(super) struct Slots {
    pools: Vec<rayon::ThreadPool>,
    free: Mutex<Vec<usize>>,
    permits: Arc<Semaphore>,
    waiting: AtomicUsize,
    max_queue: usize,
    /// Work running now (it may outlive its request by one step after a cancel).
    running: AtomicUsize,
}

/// Why no slot was given.
pub(super) enum Refused {
    /// The queue was full.
    Full,
    /// The deadline passed in the queue.
    Late,
}

/// What a request's work ended with.
pub(super) enum Ended<T> {
    /// It returned.
    Done(T),
    /// It panicked (a bug; the slot is free again).
    Panicked,
    /// The deadline passed first; the work was told to stop.
    Late,
}

/// A slot held by running work: returned (and the permit released) when dropped.
struct Lease {
    slots: Arc<Slots>,
    slot: usize,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.slots.running.fetch_sub(1, Ordering::AcqRel);
        self.slots
            .free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(self.slot);
    }
}

/// Cancels the work when the request's future is dropped before the work ended.
struct CancelOnDrop(Cancel);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

impl Slots {
    /// `slots` slots sharing `threads` threads, and a queue of `max_queue`.
    pub(super) fn new(slots: usize, threads: usize, max_queue: usize) -> std::io::Result<Arc<Slots>> {
        let slots = slots.max(1);
        let per = (threads / slots).max(1);
        let pools = (0..slots)
            .map(|i| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(per)
                    .thread_name(move |t| format!("ctxprune-slot{i}-{t}"))
                    .build()
                    .map_err(std::io::Error::other)
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Arc::new(Slots {
            pools,
            free: Mutex::new((0..slots).rev().collect()),
            permits: Arc::new(Semaphore::new(slots)),
            waiting: AtomicUsize::new(0),
            max_queue,
            running: AtomicUsize::new(0),
        }))
    }

    /// Threads of each slot.
    pub(super) fn threads_per_slot(&self) -> usize {
        self.pools
            .first()
            .map_or(1, rayon::ThreadPool::current_num_threads)
    }

    /// Work running now.
    pub(super) fn running(&self) -> usize {
        self.running.load(Ordering::Acquire)
    }

    /// Requests waiting for a slot now.
    pub(super) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }

    /// Runs `work` on a free slot's threads with a [`Cancel`] that fires at `deadline`
    /// (and when this future is dropped). Waits in the queue for a slot, within the
    /// deadline; the work's end, or the deadline, whichever comes first, answers.
    pub(super) async fn run<T: Send + 'static>(
        self: &Arc<Self>,
        deadline: Instant,
        work: impl FnOnce(&Cancel) -> T + Send + 'static,
    ) -> Result<Ended<T>, Refused> {
        let permit = match self.permits.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                let queued = self.waiting.fetch_add(1, Ordering::AcqRel);
                if queued >= self.max_queue {
                    self.waiting.fetch_sub(1, Ordering::AcqRel);
                    return Err(Refused::Full);
                }
                let left = deadline.saturating_duration_since(Instant::now());
                let got = tokio::time::timeout(left, self.permits.clone().acquire_owned()).await;
                self.waiting.fetch_sub(1, Ordering::AcqRel);
                match got {
                    Ok(Ok(p)) => p,
                    Ok(Err(_)) => return Err(Refused::Full),
                    Err(_) => return Err(Refused::Late),
                }
            }
        };
        // A permit guarantees a free slot: there are as many permits as slots, and a
        // slot goes back to the list before its permit is released (the Lease's fields
        // drop after its `drop` body).
        let slot = self
            .free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
            .unwrap_or(0);
        self.running.fetch_add(1, Ordering::AcqRel);
        let lease = Lease {
            slots: self.clone(),
            slot,
            _permit: permit,
        };
        let cancel = Cancel::with_deadline(deadline);
        let guard = CancelOnDrop(cancel.clone());
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.pools[slot].spawn(move || {
            let _lease = lease;
            // A panic is caught here (rayon would abort the process on it).
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(&cancel)));
            let _ = tx.send(r);
        });
        let left = deadline.saturating_duration_since(Instant::now());
        let ended = match tokio::time::timeout(left + Duration::from_millis(1), rx).await {
            Ok(Ok(Ok(v))) => Ended::Done(v),
            Ok(Ok(Err(_)) | Err(_)) => Ended::Panicked,
            Err(_) => Ended::Late,
        };
        // The work ended, or it was told to stop: either way the guard's cancel is right.
        drop(guard);
        Ok(ended)
    }
}
