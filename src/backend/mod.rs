//! The backend boundary: where numeric work runs.
//!
//! [`Backend`] is chosen at run time. [`Backend::auto`] uses CUDA only when the driver
//! library is present (checked before cudarc is touched: creating a context without it
//! panics inside cudarc), a device exists, the kernels compile and a small self-test
//! agrees with the CPU; otherwise the CPU, with the reason kept in [`Selected::reason`].
//! [`Backend::cuda`] returns an error instead of falling back. The environment variable
//! `CTXPRUNE_BACKEND=cpu|cuda|auto` overrides `auto`.
//!
//! [`cpu`] holds the reference primitives; `cuda` the device ones (kernels/*.cu compiled
//! by NVRTC, cuBLAS), each checked against the CPU by the backend tests and
//! `ctxprune gpu-check`.

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;

use crate::error::{Error, Result};

/// Where the numeric work runs.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// The CPU reference path (multithreaded).
    Cpu,
    /// An NVIDIA GPU, by device ordinal.
    Cuda(usize),
}

/// The backend asked for on the command line or in a config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    /// CUDA when usable, else the CPU.
    Auto,
    /// The CPU.
    Cpu,
    /// CUDA or an error.
    Cuda,
}

impl std::str::FromStr for BackendChoice {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(BackendChoice::Auto),
            "cpu" => Ok(BackendChoice::Cpu),
            "cuda" => Ok(BackendChoice::Cuda),
            _ => Err(Error::invalid(
                "backend",
                format!("unknown backend '{s}' (auto, cpu, cuda)"),
            )),
        }
    }
}

/// A backend together with why it was chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selected {
    /// The backend.
    pub backend: Backend,
    /// Why `auto` fell back to the CPU (`None` when nothing was refused).
    pub reason: Option<String>,
}

impl Backend {
    /// The name reported in outputs: `"cpu"` or `"cuda"`.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Cpu => "cpu",
            Backend::Cuda(_) => "cuda",
        }
    }

    /// CUDA when the driver, a device and the CUDA primitives are all there; else the CPU
    /// with the reason. Never panics, with or without a driver.
    #[must_use]
    pub fn auto() -> Selected {
        match std::env::var("CTXPRUNE_BACKEND").ok().as_deref() {
            Some("cpu") => {
                return Selected {
                    backend: Backend::Cpu,
                    reason: Some("CTXPRUNE_BACKEND=cpu".into()),
                }
            }
            Some("cuda") => {
                return match Backend::cuda(0) {
                    Ok(b) => Selected {
                        backend: b,
                        reason: None,
                    },
                    Err(e) => Selected {
                        backend: Backend::Cpu,
                        reason: Some(format!("CTXPRUNE_BACKEND=cuda but {e}")),
                    },
                }
            }
            _ => {}
        }
        match Backend::cuda(0) {
            Ok(b) => Selected {
                backend: b,
                reason: None,
            },
            Err(e) => Selected {
                backend: Backend::Cpu,
                reason: Some(e.to_string()),
            },
        }
    }

    /// The GPU with this ordinal, or an error saying why it cannot be used.
    pub fn cuda(ordinal: usize) -> Result<Backend> {
        #[cfg(feature = "cuda")]
        {
            cuda::open(ordinal).map(|()| Backend::Cuda(ordinal))
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = ordinal;
            Err(Error::Backend {
                backend: "cuda".into(),
                msg: "this build has no CUDA support (built without the `cuda` feature)".into(),
            })
        }
    }

    /// Resolves a [`BackendChoice`].
    pub fn choose(choice: BackendChoice) -> Result<Selected> {
        match choice {
            BackendChoice::Auto => Ok(Backend::auto()),
            BackendChoice::Cpu => Ok(Selected {
                backend: Backend::Cpu,
                reason: None,
            }),
            BackendChoice::Cuda => Backend::cuda(0).map(|b| Selected {
                backend: b,
                reason: None,
            }),
        }
    }
}
