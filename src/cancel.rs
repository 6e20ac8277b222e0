//! A cooperative stop signal for long work: a deadline, a flag, or both.
//!
//! A [`Cancel`] is cloned into the work it may stop; the work checks it at points where
//! stopping leaves nothing half-made: between greedy steps (every selector, on every
//! backend), between blocks of a quadratic build (coverage's neighbour search), and
//! before every oracle call (reranking, and each retry of an HTTP oracle). So work asked
//! to stop ends within one step, block or call, and returns [`Error::Cancelled`]; nothing
//! is left running. The service gives each request one, with the request's deadline, and
//! cancels it when the client goes away; a library caller may pass one (or none) in a
//! [`crate::select::Request`].
//!
//! ```
//! use ctxprune::cancel::Cancel;
//! let c = Cancel::new();
//! assert!(c.check().is_ok());
//! c.cancel();
//! assert!(c.check().is_err());
//! let late = Cancel::with_deadline(std::time::Instant::now());
//! assert!(late.is_cancelled());
//! ```

use crate::error::{Error, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug)]
struct State {
    flag: AtomicBool,
    deadline: Option<Instant>,
}

/// A stop signal shared by its clones: set by [`Cancel::cancel`], or by time passing its
/// deadline. The default never stops.
#[derive(Clone, Debug, Default)]
pub struct Cancel(Option<Arc<State>>);

impl Cancel {
    /// A signal that stops only when [`Cancel::cancel`] is called.
    #[must_use]
    pub fn new() -> Cancel {
        Cancel(Some(Arc::new(State {
            flag: AtomicBool::new(false),
            deadline: None,
        })))
    }

    /// A signal that stops at `deadline`, or earlier when cancelled.
    #[must_use]
    pub fn with_deadline(deadline: Instant) -> Cancel {
        Cancel(Some(Arc::new(State {
            flag: AtomicBool::new(false),
            deadline: Some(deadline),
        })))
    }

    /// A signal that never stops (what `Cancel::default()` gives).
    #[must_use]
    pub fn never() -> Cancel {
        Cancel(None)
    }

    /// Stops every clone of this signal (no effect on [`Cancel::never`]).
    pub fn cancel(&self) {
        if let Some(s) = &self.0 {
            s.flag.store(true, Ordering::Release);
        }
    }

    /// True once cancelled or past the deadline.
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        self.0.as_ref().is_some_and(|s| {
            s.flag.load(Ordering::Acquire) || s.deadline.is_some_and(|d| Instant::now() >= d)
        })
    }

    /// Time left to the deadline (`None` without one; zero once past it or cancelled).
    #[must_use]
    pub fn remaining(&self) -> Option<Duration> {
        let s = self.0.as_ref()?;
        if s.flag.load(Ordering::Acquire) {
            return Some(Duration::ZERO);
        }
        s.deadline.map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// `Err(`[`Error::Cancelled`]`)` once cancelled or past the deadline.
    pub fn check(&self) -> Result<()> {
        match &self.0 {
            Some(s) if s.flag.load(Ordering::Acquire) => Err(Error::Cancelled {
                msg: "cancelled".into(),
            }),
            Some(s) if s.deadline.is_some_and(|d| Instant::now() >= d) => Err(Error::Cancelled {
                msg: "past its deadline".into(),
            }),
            _ => Ok(()),
        }
    }
}

/// [`Cancel::check`] on an optional signal (`None` never stops).
pub(crate) fn check(c: Option<&Cancel>) -> Result<()> {
    c.map_or(Ok(()), Cancel::check)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_the_flag_and_deadlines_pass() {
        let a = Cancel::new();
        let b = a.clone();
        assert!(!b.is_cancelled() && b.remaining().is_none());
        a.cancel();
        assert!(b.is_cancelled());
        assert_eq!(b.remaining(), Some(Duration::ZERO));
        assert!(matches!(b.check(), Err(Error::Cancelled { .. })));

        let far = Cancel::with_deadline(Instant::now() + Duration::from_secs(3600));
        assert!(far.check().is_ok());
        assert!(far.remaining().unwrap() > Duration::from_secs(3000));
        let past = Cancel::with_deadline(Instant::now() - Duration::from_millis(1));
        assert!(past.check().unwrap_err().to_string().contains("deadline"));

        let never = Cancel::never();
        never.cancel();
        assert!(never.check().is_ok() && check(None).is_ok());
    }
}
