//! The CUDA backend: a [`Device`] opened once per engine, and the capabilities it runs.
//!
//! - `raw`: everything that touches the driver, NVRTC and cuBLAS (every `unsafe` of the
//!   crate): library loading, NVRTC calls, the context, lanes (one stream and cuBLAS
//!   handle per concurrent request), device buffers and one typed launch function per
//!   kernel;
//! - [`libs`], [`compile`]: finding NVRTC and cuBLAS; compiling kernels/*.cu for the
//!   device's architecture (with an optional on-disk cache);
//! - [`gram`]: Gram blocks with kernel epilogues, resident pools, kernel rows;
//! - [`greedy`]: the greedy selectors' step kernels behind the
//!   [`Picker`](crate::backend::picker::Picker) trait;
//! - [`gp`]: the GP store of budgeted top-k;
//! - [`batched`]: MMR over many pools in one launch per step;
//! - [`selftest`], [`check`]: the check `open` runs, and `ctxprune gpu-check`.
//!
//! Opening never panics: the driver library is looked for before cudarc touches it
//! (cudarc panics when it is missing), and a panic inside a CUDA library while opening is
//! caught and reported.

pub mod attention;
pub mod batched;
pub mod check;
pub mod compile;
#[cfg(all(test, feature = "cuda-emu"))]
mod emu_tests;
pub mod gp;
pub mod gram;
pub mod greedy;
pub mod libs;
pub(crate) mod raw;
pub mod selftest;

pub use gram::{DevRows, HalfRows};
/// With the `cuda-emu` feature: every kernel with its number of emulated launches so far.
#[cfg(feature = "cuda-emu")]
pub use raw::launches as emulated_launches;
/// With the `cuda-emu` feature: run the emulated kernels' threads, for launches made from
/// the calling thread, as OS threads (`true`, what the race check under ThreadSanitizer
/// needs) or as fibers (`false`, the default).
#[cfg(feature = "cuda-emu")]
pub use raw::set_os_threads as emulate_with_os_threads;

use super::EngineOptions;
use crate::error::{Error, Result};
use std::sync::Arc;

pub(crate) use attention::attention_mass;
pub(crate) use compile::compile_kernels;
pub(crate) use gp::{gp_store, kernel_row_reader};
pub(crate) use gram::{gram, gram_batched, gram_half, gram_rows, upload_half_rows, upload_rows};
pub(crate) use greedy::greedy_picker;

/// A [`Error::DeviceUnavailable`] for `cuda:{ordinal}` (or plain `cuda` before a device is
/// known).
pub(crate) fn unavailable(ordinal: Option<usize>, msg: impl Into<String>) -> Error {
    Error::DeviceUnavailable {
        backend: ordinal.map_or_else(|| "cuda".to_string(), |o| format!("cuda:{o}")),
        msg: msg.into(),
    }
}

/// What a device is, as opened.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// Device ordinal.
    pub ordinal: usize,
    /// The device's name as the driver reports it.
    pub name: String,
    /// Compute capability.
    pub cc: (i32, i32),
    /// The architecture the kernels were compiled for (`compute_XY`).
    pub arch: String,
    /// The NVRTC version that compiled them.
    pub nvrtc: (i32, i32),
    /// Device memory in bytes.
    pub total_mem: usize,
    /// Why cuBLAS is not used (the Gram then runs on the crate's tiled kernel).
    pub blas_missing: Option<String>,
}

/// A CUDA device with the crate's kernels loaded and self-tested; clones share it.
#[derive(Clone)]
pub struct Device {
    ctx: Arc<raw::Context>,
    info: Arc<DeviceInfo>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

/// Number of CUDA devices, or why none can be reached. Never panics.
pub fn device_count() -> Result<usize> {
    if !raw::driver_present() {
        return Err(unavailable(
            None,
            "no CUDA driver library (libcuda.so) found on this machine",
        ));
    }
    match std::panic::catch_unwind(raw::device_count) {
        Ok(Ok(n)) => Ok(n),
        Ok(Err(msg)) => Err(unavailable(None, msg)),
        Err(_) => Err(unavailable(None, "the CUDA driver library could not be loaded")),
    }
}

impl Device {
    /// Opens device `ordinal`: context, kernels compiled for its architecture (NVRTC, or
    /// the cache in `opts`), cuBLAS when found, then the self-test against the CPU.
    pub fn open(ordinal: usize, opts: &EngineOptions) -> Result<Device> {
        let made = std::panic::catch_unwind(|| Device::create(ordinal, opts));
        let dev = match made {
            Ok(r) => r?,
            Err(_) => {
                return Err(unavailable(
                    Some(ordinal),
                    "a CUDA library panicked while the device was opened",
                ))
            }
        };
        selftest::self_test(&dev).map_err(|e| match e {
            Error::DeviceUnavailable { .. } => e,
            other => unavailable(Some(ordinal), format!("self-test: {other}")),
        })?;
        Ok(dev)
    }

    fn create(ordinal: usize, opts: &EngineOptions) -> Result<Device> {
        let n = device_count()?;
        if ordinal >= n {
            return Err(unavailable(
                Some(ordinal),
                format!("device {ordinal} requested but {n} CUDA device(s) found"),
            ));
        }
        let blas = libs::ensure_cublas(opts);
        // What compiled the kernels: NVRTC's version and the architecture (left empty by an
        // emulated device, whose kernels are compiled in).
        let compiled_by = std::cell::RefCell::new(((0, 0), String::from("emulated")));
        let open = |fresh: bool, cubin: bool| {
            let load = |p: &raw::DeviceProps| -> Result<Vec<crate::backend::report::Compiled>> {
                let v = compile::nvrtc_version(opts)?;
                let a = format!("{}_{}{}", if cubin { "sm" } else { "compute" }, p.cc.0, p.cc.1);
                let compiled = compile::compile_all_cached(&a, opts, fresh)?;
                *compiled_by.borrow_mut() = (v, a);
                Ok(compiled)
            };
            raw::Context::create(ordinal, &load, blas.is_ok())
        };
        // A CUBIN for the device's exact architecture first (a driver loads one from any
        // NVRTC of its CUDA major version; it refuses PTX from an NVRTC newer than itself),
        // then PTX. A cache entry that reads but does not load (truncated, or from another
        // driver) is not an error: compile afresh, which also rewrites the entry.
        let mut attempts = vec![(true, true), (true, false)];
        if opts.cache_dir.is_some() {
            attempts.insert(0, (false, true));
        }
        let mut why = Vec::new();
        let mut opened = None;
        for (fresh, cubin) in attempts {
            match open(fresh, cubin) {
                Ok(x) => {
                    opened = Some(x);
                    break;
                }
                Err(e) => why.push(format!("{}: {e}", if cubin { "CUBIN" } else { "PTX" })),
            }
        }
        let Some((ctx, props)) = opened else {
            return Err(unavailable(Some(ordinal), why.join("; ")));
        };
        let ((nvrtc, arch), blas_missing) = (
            compiled_by.into_inner(),
            if ctx.has_blas() {
                None
            } else {
                blas.err().map(|e| e.to_string())
            },
        );
        Ok(Device {
            ctx,
            info: Arc::new(DeviceInfo {
                ordinal,
                name: props.name,
                cc: props.cc,
                arch,
                nvrtc,
                total_mem: props.total_mem,
                blas_missing,
            }),
        })
    }

    /// What the device is.
    #[must_use]
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The device ordinal.
    #[must_use]
    pub fn ordinal(&self) -> usize {
        self.info.ordinal
    }

    /// One line: ordinal, name, architecture, NVRTC, cuBLAS.
    #[must_use]
    pub fn describe(&self) -> String {
        let i = &self.info;
        format!(
            "cuda:{} {} (sm_{}{}), kernels for {} by NVRTC {}.{}, cuBLAS {}",
            i.ordinal,
            i.name,
            i.cc.0,
            i.cc.1,
            i.arch,
            i.nvrtc.0,
            i.nvrtc.1,
            if i.blas_missing.is_none() { "yes" } else { "no" }
        )
    }

    /// Free and total device memory in bytes.
    #[must_use]
    pub fn mem_info(&self) -> (usize, usize) {
        self.ctx.mem_info()
    }

    /// A lane for one request's work.
    pub(crate) fn lane(&self) -> Result<raw::Lane> {
        self.ctx.lane()
    }
}

/// Threads per block of every launch (kernels/common.cuh `CTX_TPB`).
pub(crate) const TPB: u32 = 256;

/// One thread per element.
pub(crate) fn per_elem(n: usize) -> raw::Grid {
    let blocks = n.div_ceil(TPB as usize).clamp(1, u32::MAX as usize) as u32;
    raw::Grid {
        blocks: (blocks, 1, 1),
        threads: TPB,
    }
}

/// One warp per row.
pub(crate) fn per_row(n: usize) -> raw::Grid {
    per_elem(n.saturating_mul(32))
}

/// One half-warp per row (the kernels whose dot products follow the CPU's 16 lanes).
pub(crate) fn per_half_warp(n: usize) -> raw::Grid {
    per_elem(n.saturating_mul(16))
}

/// A `rows × cols` matrix: columns over x, rows over y (at most 65,535; kernels stride).
pub(crate) fn matrix(rows: usize, cols: usize) -> raw::Grid {
    let bx = cols.div_ceil(TPB as usize).clamp(1, 65_535) as u32;
    let by = rows.clamp(1, 65_535) as u32;
    raw::Grid {
        blocks: (bx, by, 1),
        threads: TPB,
    }
}

/// `v` as a kernel's `int`, or an error naming `what`.
pub(crate) fn to_i32(v: usize, what: &str) -> Result<i32> {
    i32::try_from(v).map_err(|_| Error::invalid(what, format!("{v} is above the CUDA path's limit of 2^31")))
}

/// `v` as a kernel's `long long`.
pub(crate) fn to_i64(v: usize) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Device state that a failed operation may have left half-updated: after the first error,
/// every later call fails too, saying so (the state is not used again; reopen the engine
/// or start a new selection).
#[derive(Default)]
pub(crate) struct Poison(Option<String>);

impl Poison {
    /// An error when an earlier operation failed.
    pub(crate) fn check(&self, ordinal: usize) -> Result<()> {
        match &self.0 {
            None => Ok(()),
            Some(why) => Err(Error::DeviceFailed {
                backend: format!("cuda:{ordinal}"),
                msg: format!("an earlier step failed, so this state is incomplete ({why})"),
            }),
        }
    }

    /// `r`, remembering its error.
    pub(crate) fn guard<T>(&mut self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            self.0 = Some(e.to_string());
        }
        r
    }
}

/// An error unless `got == n`.
pub(crate) fn checked_len(what: &str, got: usize, n: usize) -> Result<()> {
    if got == n {
        Ok(())
    } else {
        Err(Error::invalid(what, format!("{got} values for a pool of {n}")))
    }
}
