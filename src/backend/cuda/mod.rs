//! The CUDA backend. Every `unsafe` block of the crate lives in this folder.
//!
//! What is here now is run-time detection: is the driver library loadable, is there a
//! device with this ordinal. The kernels (kernels/*.cu), their NVRTC compilation, the
//! module cache and the launch wrappers come with the CUDA backend issue; until then
//! [`open`] reports a found device as not yet usable, so `auto` stays on the CPU and an
//! explicit CUDA request fails with that reason.

use crate::error::{Error, Result};

fn err(msg: impl Into<String>) -> Error {
    Error::Backend {
        backend: "cuda".into(),
        msg: msg.into(),
    }
}

/// Number of CUDA devices, or why none can be reached. Never panics: the driver library
/// is looked for before cudarc touches it (cudarc panics when it is missing).
pub fn device_count() -> Result<usize> {
    // cudarc's dynamic loader panics if libcuda cannot be opened; ask first.
    // SAFETY: is_culib_present only tries to dlopen the driver library by its known names
    // and closes it again; it has no preconditions.
    let present = unsafe { cudarc::driver::sys::is_culib_present() };
    if !present {
        return Err(err("no CUDA driver library (libcuda.so) found on this machine"));
    }
    let found = std::panic::catch_unwind(|| -> std::result::Result<usize, String> {
        cudarc::driver::result::init().map_err(|e| format!("cuInit failed: {e}"))?;
        let n = cudarc::driver::result::device::get_count()
            .map_err(|e| format!("cuDeviceGetCount failed: {e}"))?;
        Ok(n as usize)
    });
    match found {
        Ok(Ok(n)) => Ok(n),
        Ok(Err(msg)) => Err(err(msg)),
        Err(_) => Err(err("the CUDA driver library could not be loaded")),
    }
}

/// Checks that device `ordinal` exists and can run the crate's primitives.
pub fn open(ordinal: usize) -> Result<()> {
    let n = device_count()?;
    if ordinal >= n {
        return Err(err(format!(
            "device {ordinal} requested but {n} CUDA device(s) found"
        )));
    }
    Err(err(format!(
        "found {n} CUDA device(s), but this version has no CUDA kernels yet; the CPU path runs everything"
    )))
}

/// The CUDA C sources of kernels/, embedded at build time by build.rs (names, sources
/// and a content hash that keys the compiled-module cache).
pub mod sources {
    include!(concat!(env!("OUT_DIR"), "/kernels.rs"));
}
