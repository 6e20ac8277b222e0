//! Run-time compilation of the embedded kernels (kernels/*.cu) by NVRTC, and the on-disk
//! PTX cache.
//!
//! Each `.cu` file is one NVRTC program; its `#include "X.cuh"` lines name embedded
//! headers and are replaced by their text, so no include path is needed. The program log
//! is kept: the CI proof ([`compile_all`] through `ctxprune kernels`) fails on any
//! warning, the run-time path reports it.
//!
//! Compiled PTX is cached per kernel-source hash, NVRTC version and architecture under
//! `$CTXPRUNE_CACHE_DIR`, else `$XDG_CACHE_HOME/ctxprune`, else `$HOME/.cache/ctxprune`;
//! a cache that cannot be read or written is skipped, never an error.

use super::{err, libs, sources};
use crate::error::Result;
use std::ffi::{CStr, CString};
use std::path::PathBuf;

/// NVRTC options besides the architecture (part of the PTX cache key). No implicit
/// contraction of `a * b + c`: sums like `colsq += x * x` round as on the CPU; the
/// products and dot products that want an FMA ask for one (`fmaf` / `fma`).
pub const OPTIONS: [&str; 2] = ["--std=c++17", "--fmad=false"];

/// One compiled kernel file.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The `.cu` file name.
    pub file: &'static str,
    /// PTX text.
    pub ptx: String,
    /// NVRTC's program log (empty when the compile was clean).
    pub log: String,
}

impl Compiled {
    /// The `extern "C"` kernels (PTX `.entry` names) in this file.
    #[must_use]
    pub fn entries(&self) -> Vec<String> {
        self.ptx
            .lines()
            .filter_map(|l| {
                let rest = l.trim_start().strip_prefix(".visible .entry ")?;
                Some(rest.split('(').next()?.trim().to_string())
            })
            .collect()
    }
}

/// The `.cu` files embedded in this build.
#[must_use]
pub fn files() -> Vec<&'static str> {
    sources::SOURCES
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| n.ends_with(".cu"))
        .collect()
}

/// The source of `file` with its embedded `#include "X"` lines expanded.
pub fn expand(file: &str) -> Result<String> {
    let src = sources::SOURCES
        .iter()
        .find(|(n, _)| *n == file)
        .map(|(_, s)| *s)
        .ok_or_else(|| err(format!("no kernel file '{file}' in this build")))?;
    let mut out = String::with_capacity(src.len() + 4096);
    for line in src.lines() {
        let inc = line
            .trim()
            .strip_prefix("#include \"")
            .and_then(|r| r.strip_suffix('"'));
        match inc {
            Some(h) => {
                let text = sources::SOURCES
                    .iter()
                    .find(|(n, _)| *n == h)
                    .map(|(_, s)| *s)
                    .ok_or_else(|| err(format!("{file} includes '{h}', which is not in kernels/")))?;
                out.push_str(text);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    Ok(out)
}

/// NVRTC's version, loading the library first (from the loader path or a CUDA install).
pub fn nvrtc_version() -> Result<(i32, i32)> {
    libs::ensure_nvrtc()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the NVRTC library is loaded (ensure_nvrtc); nvrtcVersion writes two ints
    // through valid pointers to locals.
    let rc = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    if rc != cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(err(format!("nvrtcVersion failed: {rc:?}")));
    }
    Ok((major, minor))
}

/// Compiles one kernel file for `arch` (e.g. `"compute_90"`).
pub fn compile_file(file: &'static str, arch: &str) -> Result<Compiled> {
    use cudarc::nvrtc::result as nv;
    libs::ensure_nvrtc()?;
    let src = expand(file)?;
    let csrc = CString::new(src).map_err(|_| err(format!("{file}: NUL byte in kernel source")))?;
    let cname = CString::new(file).map_err(|_| err(format!("{file}: NUL byte in file name")))?;
    let prog = nv::create_program(&csrc, Some(&cname))
        .map_err(|e| err(format!("{file}: nvrtcCreateProgram failed: {e:?}")))?;
    let mut opts = vec![format!("--gpu-architecture={arch}")];
    opts.extend(OPTIONS.iter().map(|o| (*o).to_string()));
    // SAFETY: `prog` is a live program created above; the options are valid C strings
    // built by compile_program.
    let compiled = unsafe { nv::compile_program(prog, &opts) };
    // SAFETY: `prog` is live; the log is a NUL-terminated buffer NVRTC sized itself.
    let log = unsafe { nv::get_program_log(prog) }
        .map(|raw| {
            // SAFETY: get_program_log returns a NUL-terminated buffer.
            let c = unsafe { CStr::from_ptr(raw.as_ptr()) };
            c.to_string_lossy().trim().to_string()
        })
        .unwrap_or_default();
    let ptx = match compiled {
        Ok(()) => {
            // SAFETY: `prog` compiled successfully; the PTX buffer is NUL-terminated.
            unsafe { nv::get_ptx(prog) }.map(|raw| {
                // SAFETY: get_ptx returns a NUL-terminated buffer.
                let c = unsafe { CStr::from_ptr(raw.as_ptr()) };
                c.to_string_lossy().into_owned()
            })
        }
        Err(e) => Err(e),
    };
    // SAFETY: `prog` is live and destroyed exactly once, after its last use.
    let _ = unsafe { nv::destroy_program(prog) };
    match ptx {
        Ok(ptx) => Ok(Compiled { file, ptx, log }),
        Err(e) => Err(err(format!(
            "{file}: NVRTC compile for {arch} failed ({e:?}):\n{log}"
        ))),
    }
}

/// Compiles every kernel file for `arch`.
pub fn compile_all(arch: &str) -> Result<Vec<Compiled>> {
    files().into_iter().map(|f| compile_file(f, arch)).collect()
}

fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("CTXPRUNE_CACHE_DIR") {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(d).join("ctxprune"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").join("ctxprune"))
}

/// Every kernel file compiled for `arch`, from the disk cache when a matching entry is
/// there (same sources, NVRTC version and architecture).
pub fn compile_all_cached(arch: &str) -> Result<Vec<Compiled>> {
    let (maj, min) = nvrtc_version()?;
    let dir = cache_dir();
    let path = |f: &str| {
        dir.as_ref().map(|d| {
            d.join(format!(
                "{f}-{:016x}-{arch}-nvrtc{maj}.{min}-{}.ptx",
                sources::SOURCES_HASH,
                OPTIONS.join("").replace(['-', '=', '+'], "")
            ))
        })
    };
    let mut out = Vec::new();
    for f in files() {
        if let Some(ptx) = path(f).and_then(|p| std::fs::read_to_string(p).ok()) {
            out.push(Compiled {
                file: f,
                ptx,
                log: String::new(),
            });
            continue;
        }
        let c = compile_file(f, arch)?;
        if let (Some(d), Some(p)) = (dir.as_ref(), path(f)) {
            let tmp = p.with_extension(format!("tmp{}", std::process::id()));
            let _ = std::fs::create_dir_all(d)
                .and_then(|()| std::fs::write(&tmp, &c.ptx))
                .and_then(|()| std::fs::rename(&tmp, &p));
        }
        out.push(c);
    }
    Ok(out)
}
