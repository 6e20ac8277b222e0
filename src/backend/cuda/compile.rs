//! Run-time compilation of the embedded kernels (kernels/*.cu) by NVRTC, and the optional
//! on-disk PTX cache.
//!
//! Each `.cu` file is one NVRTC program; its `#include "X.cuh"` lines name embedded
//! headers and are replaced by their text, so no include path is needed. The program log
//! is kept: the CI proof ([`compile_kernels`], behind `ctxprune kernels`) fails on any
//! warning, the run-time path reports it.
//!
//! Compiled PTX is cached per kernel-source hash, NVRTC version, architecture and options
//! under [`EngineOptions::cache_dir`] when one is given; a cache that cannot be read or
//! written is skipped, never an error.

use super::{libs, raw, unavailable};
use crate::backend::report::{Compiled, KernelsReport};
use crate::backend::EngineOptions;
use crate::error::Result;

/// The CUDA C sources of kernels/, embedded at build time by build.rs (names, sources and
/// a content hash that keys the compiled-module cache).
pub mod sources {
    include!(concat!(env!("OUT_DIR"), "/kernels.rs"));
}

/// NVRTC options besides the architecture (part of the PTX cache key). No implicit
/// contraction of `a * b + c`: sums like `colsq += x * x` round as on the CPU; the
/// products and dot products that want an FMA ask for one (`fmaf` / `fma`).
pub const OPTIONS: [&str; 2] = ["--std=c++17", "--fmad=false"];

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
    let find = |name: &str| sources::SOURCES.iter().find(|(n, _)| *n == name).map(|(_, s)| *s);
    let src =
        find(file).ok_or_else(|| unavailable(None, format!("no kernel file '{file}' in this build")))?;
    let mut out = String::with_capacity(src.len() + 4096);
    for line in src.lines() {
        let inc = line
            .trim()
            .strip_prefix("#include \"")
            .and_then(|r| r.strip_suffix('"'));
        match inc {
            Some(h) => out.push_str(find(h).ok_or_else(|| {
                unavailable(None, format!("{file} includes '{h}', which is not in kernels/"))
            })?),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    Ok(out)
}

/// NVRTC's version, loading the library first.
pub fn nvrtc_version(opts: &EngineOptions) -> Result<(i32, i32)> {
    libs::ensure_nvrtc(opts)?;
    raw::nvrtc_version().map_err(|m| unavailable(None, m))
}

/// Compiles one kernel file for `arch` (e.g. `"compute_90"`).
pub fn compile_file(file: &'static str, arch: &str, opts: &EngineOptions) -> Result<Compiled> {
    libs::ensure_nvrtc(opts)?;
    let src = expand(file)?;
    let mut o = vec![format!("--gpu-architecture={arch}")];
    o.extend(OPTIONS.iter().map(|s| (*s).to_string()));
    match raw::nvrtc_compile(&src, file, &o) {
        Ok((ptx, log)) => Ok(Compiled {
            file,
            arch: arch.to_string(),
            ptx,
            log,
        }),
        Err((what, log)) => Err(unavailable(
            None,
            format!(
                "{file}: NVRTC compile for {arch} failed ({what}): {}",
                log.lines().next().unwrap_or("no log")
            ),
        )),
    }
}

/// Every kernel file compiled for `arch`, from the cache when a matching entry is there
/// (same sources, NVRTC version, architecture and options) unless `fresh`; what is
/// compiled is written to the cache.
pub fn compile_all_cached(arch: &str, opts: &EngineOptions, fresh: bool) -> Result<Vec<Compiled>> {
    let (maj, min) = nvrtc_version(opts)?;
    let path = |f: &str| {
        opts.cache_dir.as_ref().map(|d| {
            d.join(format!(
                "{f}-{:016x}-{arch}-nvrtc{maj}.{min}-{}.ptx",
                sources::SOURCES_HASH,
                OPTIONS.join("").replace(['-', '=', '+'], "")
            ))
        })
    };
    let mut out = Vec::new();
    for f in files() {
        if let Some(ptx) = path(f)
            .filter(|_| !fresh)
            .and_then(|p| std::fs::read_to_string(p).ok())
        {
            out.push(Compiled {
                file: f,
                arch: arch.to_string(),
                ptx,
                log: String::new(),
            });
            continue;
        }
        let c = compile_file(f, arch, opts)?;
        if let (Some(d), Some(p)) = (opts.cache_dir.as_ref(), path(f)) {
            let tmp = p.with_extension(format!("tmp{}", std::process::id()));
            let _ = std::fs::create_dir_all(d)
                .and_then(|()| std::fs::write(&tmp, &c.ptx))
                .and_then(|()| std::fs::rename(&tmp, &p));
        }
        out.push(c);
    }
    Ok(out)
}

/// Compiles every kernel file for each of `archs` (`sm_XY` or `compute_XY`): no GPU
/// needed. A malformed architecture is named before any library is looked for.
pub fn compile_kernels(archs: &[String], opts: &EngineOptions) -> Result<KernelsReport> {
    let mut targets = Vec::new();
    for arch in archs {
        let num = arch
            .strip_prefix("sm_")
            .or_else(|| arch.strip_prefix("compute_"))
            .filter(|n| {
                let digits = n.chars().take_while(char::is_ascii_digit).count();
                digits >= 2 && n[digits..].chars().all(|c| c.is_ascii_lowercase())
            })
            .ok_or_else(|| {
                crate::error::Error::invalid("--arch", format!("'{arch}' is not sm_XY or compute_XY"))
            })?;
        targets.push(format!("compute_{num}"));
    }
    if targets.is_empty() {
        return Err(crate::error::Error::invalid("--arch", "no architecture given"));
    }
    let nvrtc = nvrtc_version(opts)?;
    let mut compiled = Vec::new();
    for t in &targets {
        for f in files() {
            compiled.push(compile_file(f, t, opts)?);
        }
        // Every compiled kernel has a typed launch (raw.rs's table), and every launch a
        // kernel: a kernel added to a .cu file without one, or renamed, fails here.
        let mut entries: Vec<String> = compiled
            .iter()
            .filter(|c| &c.arch == t)
            .flat_map(|c| c.entries())
            .collect();
        entries.sort();
        let mut table: Vec<String> = raw::Funcs::NAMES.iter().map(|s| (*s).to_string()).collect();
        table.sort();
        if entries != table {
            let missing: Vec<&String> = entries.iter().filter(|e| !table.contains(e)).collect();
            let stale: Vec<&String> = table.iter().filter(|e| !entries.contains(e)).collect();
            return Err(unavailable(
                None,
                format!("kernels without a typed launch in raw.rs: {missing:?}; launches without a kernel: {stale:?}"),
            ));
        }
    }
    Ok(KernelsReport {
        nvrtc,
        sources_hash: sources::SOURCES_HASH,
        compiled,
    })
}
