//! The CUDA backend. Every `unsafe` block of the crate lives in this folder, each with a
//! `// SAFETY:` line.
//!
//! - [`device_count`] / [`open`]: run-time detection that never panics. The driver
//!   library is looked for before cudarc touches it (cudarc panics when it is missing);
//!   NVRTC and cuBLAS are looked for on the loader path, then under `$CUDA_HOME`,
//!   `$CUDA_PATH` and `/usr/local/cuda` ([`libs`]).
//! - [`compile`]: NVRTC compilation of kernels/*.cu for the device's architecture, with a
//!   PTX cache on disk; [`Device`] keeps the loaded module per device for the process.
//! - [`ops`]: the primitives (Gram blocks with kernel epilogues, greedy-selector steps, GP
//!   posterior updates) and the self-test `open` runs before a device is used.

pub mod check;
pub mod compile;
pub mod ops;

use crate::error::{Error, Result};
use cudarc::driver::{CudaContext, CudaFunction, CudaStream};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

pub(crate) fn err(msg: impl Into<String>) -> Error {
    Error::Backend {
        backend: "cuda".into(),
        msg: msg.into(),
    }
}

/// Finding the NVRTC and cuBLAS libraries where CUDA installs put them. A library found
/// by full path is opened once and kept open, so cudarc's later open by file name finds
/// the already-loaded copy (the dynamic loader matches its soname).
pub mod libs {
    use super::err;
    use crate::error::Result;
    use std::path::PathBuf;
    use std::sync::OnceLock;

    /// Directories searched after the loader path, in order.
    #[must_use]
    pub fn search_dirs() -> Vec<PathBuf> {
        let mut dirs = Vec::new();
        for var in ["CUDA_HOME", "CUDA_PATH"] {
            if let Some(root) = std::env::var_os(var) {
                let root = PathBuf::from(root);
                dirs.push(root.join("lib64"));
                dirs.push(root.join("lib"));
                dirs.push(root.join("targets/x86_64-linux/lib"));
            }
        }
        dirs.push(PathBuf::from("/usr/local/cuda/lib64"));
        dirs.push(PathBuf::from("/usr/local/cuda/targets/x86_64-linux/lib"));
        dirs
    }

    /// Opens the first of `names` that loads, from the loader path first, then from
    /// [`search_dirs`]; the handle is kept for the life of the process.
    fn preload(names: &[&str]) -> Option<String> {
        let mut tries: Vec<PathBuf> = names.iter().map(PathBuf::from).collect();
        for d in search_dirs() {
            tries.extend(names.iter().map(|n| d.join(n)));
        }
        for t in tries {
            // SAFETY: loading a CUDA library runs its initialisers, which have no
            // preconditions; the handle is leaked so the library is never unloaded while
            // cudarc holds symbols from it.
            if let Ok(lib) = unsafe { libloading::Library::new(&t) } {
                std::mem::forget(lib);
                return Some(t.display().to_string());
            }
        }
        None
    }

    /// Makes NVRTC loadable, or says where it was looked for.
    pub fn ensure_nvrtc() -> Result<()> {
        static FOUND: OnceLock<std::result::Result<String, String>> = OnceLock::new();
        FOUND
            .get_or_init(|| {
                let found = preload(&["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"]);
                // SAFETY: is_culib_present only tries to open the library by name.
                let present = unsafe { cudarc::nvrtc::sys::is_culib_present() };
                match (found, present) {
                    (Some(p), true) => Ok(p),
                    _ => Err(format!(
                        "NVRTC (libnvrtc.so.13) not found on the loader path or in {:?}; set CUDA_HOME or LD_LIBRARY_PATH",
                        search_dirs()
                    )),
                }
            })
            .clone()
            .map(|_| ())
            .map_err(err)
    }

    /// Makes cuBLAS loadable, or says where it was looked for.
    pub fn ensure_cublas() -> Result<()> {
        static FOUND: OnceLock<std::result::Result<String, String>> = OnceLock::new();
        FOUND
            .get_or_init(|| {
                // cuBLAS needs cuBLASLt: load it first so cuBLAS's own dependency resolves.
                let _ = preload(&["libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"]);
                let found = preload(&["libcublas.so.13", "libcublas.so.12", "libcublas.so"]);
                // SAFETY: is_culib_present only tries to open the library by name.
                let present = unsafe { cudarc::cublas::sys::is_culib_present() };
                match (found, present) {
                    (Some(p), true) => Ok(p),
                    _ => Err(format!(
                        "cuBLAS (libcublas.so.13) not found on the loader path or in {:?}",
                        search_dirs()
                    )),
                }
            })
            .clone()
            .map(|_| ())
            .map_err(err)
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

/// A CUDA device with the crate's kernels loaded: one context, one stream, cuBLAS when
/// the library is there.
pub struct Device {
    /// Device ordinal.
    pub ordinal: usize,
    /// The device's name as the driver reports it.
    pub name: String,
    /// Compute capability.
    pub cc: (i32, i32),
    /// The NVRTC architecture the kernels were compiled for (`compute_XY`).
    pub arch: String,
    /// The NVRTC version that compiled them.
    pub nvrtc: (i32, i32),
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    funcs: HashMap<String, CudaFunction>,
    pub(crate) blas: Option<cudarc::cublas::CudaBlas>,
    /// Why cuBLAS is not used (the Gram then runs on the crate's tiled kernel).
    pub blas_missing: Option<String>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("ordinal", &self.ordinal)
            .field("name", &self.name)
            .field("cc", &self.cc)
            .field("arch", &self.arch)
            .finish_non_exhaustive()
    }
}

impl Device {
    pub(crate) fn func(&self, name: &str) -> Result<&CudaFunction> {
        self.funcs
            .get(name)
            .ok_or_else(|| err(format!("kernel '{name}' is not in the compiled module")))
    }

    /// Waits for every queued operation.
    pub fn sync(&self) -> Result<()> {
        self.stream
            .synchronize()
            .map_err(|e| err(format!("stream synchronize: {e}")))
    }

    fn create(ordinal: usize) -> Result<Device> {
        let n = device_count()?;
        if ordinal >= n {
            return Err(err(format!(
                "device {ordinal} requested but {n} CUDA device(s) found"
            )));
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| err(format!("context on device {ordinal}: {e}")))?;
        // SAFETY: the crate issues all work on one stream per device, so the cross-stream
        // event tracking this disables is never needed.
        unsafe { ctx.disable_event_tracking() };
        let name = ctx.name().unwrap_or_else(|_| "unknown".into());
        let cc = ctx
            .compute_capability()
            .map_err(|e| err(format!("compute capability: {e}")))?;
        let nvrtc = compile::nvrtc_version()?;
        let arch = format!("compute_{}{}", cc.0, cc.1);
        let compiled = compile::compile_all_cached(&arch)?;
        let mut funcs = HashMap::new();
        for c in &compiled {
            let module = ctx
                .load_module(cudarc::nvrtc::Ptx::from_src(c.ptx.clone()))
                .map_err(|e| {
                    err(format!(
                        "loading {} (PTX from NVRTC {}.{} for {arch}) failed: {e}; a driver older than the NVRTC refuses its PTX: put the NVRTC that ships with the driver's CUDA first on LD_LIBRARY_PATH",
                        c.file, nvrtc.0, nvrtc.1
                    ))
                })?;
            for entry in c.entries() {
                let f = module
                    .load_function(&entry)
                    .map_err(|e| err(format!("kernel {entry}: {e}")))?;
                funcs.insert(entry, f);
            }
        }
        let stream = ctx.default_stream();
        let (blas, blas_missing) = match libs::ensure_cublas().and_then(|()| {
            cudarc::cublas::CudaBlas::new(stream.clone()).map_err(|e| err(format!("cuBLAS: {e}")))
        }) {
            Ok(b) => (Some(b), None),
            Err(e) => (None, Some(e.to_string())),
        };
        Ok(Device {
            ordinal,
            name,
            cc,
            arch,
            nvrtc,
            ctx,
            stream,
            funcs,
            blas,
            blas_missing,
        })
    }
}

type Slot = std::result::Result<Arc<Device>, String>;

/// The device with this ordinal, its kernels compiled and self-tested: created once per
/// process (a failure is remembered too, so `auto` does not retry it).
pub fn device(ordinal: usize) -> Result<Arc<Device>> {
    static DEVICES: OnceLock<Mutex<HashMap<usize, Slot>>> = OnceLock::new();
    let map = DEVICES.get_or_init(|| Mutex::new(HashMap::new()));
    let mut map = map.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let slot = map.entry(ordinal).or_insert_with(|| {
        let made = std::panic::catch_unwind(|| {
            let dev = Arc::new(Device::create(ordinal)?);
            ops::self_test(&dev)?;
            Ok::<_, Error>(dev)
        });
        match made {
            Ok(Ok(d)) => Ok(d),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("backend cuda: a CUDA library panicked while the device was opened".into()),
        }
    });
    slot.clone().map_err(|m| Error::Backend {
        backend: "cuda".into(),
        msg: m.strip_prefix("backend cuda: ").unwrap_or(&m).to_string(),
    })
}

/// Checks that device `ordinal` exists, compiles the kernels and passes the self-test.
pub fn open(ordinal: usize) -> Result<()> {
    device(ordinal).map(|_| ())
}

/// The CUDA C sources of kernels/, embedded at build time by build.rs (names, sources
/// and a content hash that keys the compiled-module cache).
pub mod sources {
    include!(concat!(env!("OUT_DIR"), "/kernels.rs"));
}
