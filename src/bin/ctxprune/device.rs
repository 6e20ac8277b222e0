//! `ctxprune kernels` (compile every CUDA kernel with NVRTC, no GPU needed) and
//! `ctxprune gpu-check` (every device path against the CPU on a GPU host).

use super::engine_options;
use ctxprune::{Error, Result};

#[derive(clap::Args)]
pub struct KernelsArgs {
    /// Target architectures, comma-separated (sm_XY or compute_XY).
    #[arg(long, default_value = "sm_80,sm_90")]
    pub arch: String,
    /// Directory the PTX and CUBIN files are written to (FILE.sm_XY.ptx, FILE.sm_XY.cubin).
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
}

#[derive(clap::Args)]
pub struct GpuCheckArgs {
    /// Device ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// Skip the timing table (correctness checks only).
    #[arg(long)]
    pub no_timing: bool,
    /// Seed of the random inputs (default: fresh from the clock, printed for replay).
    #[arg(long)]
    pub seed: Option<u64>,
}

/// Runs `ctxprune kernels`.
pub fn kernels(a: KernelsArgs) -> Result<()> {
    use std::io::Write as _;
    let archs: Vec<String> = a
        .arch
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    if let Some(d) = &a.out {
        std::fs::create_dir_all(d).map_err(|e| Error::io(d.display().to_string(), e))?;
    }
    let rep = ctxprune::backend::compile_kernels(&archs, &engine_options())?;
    let mut so = std::io::stdout().lock();
    let _ = writeln!(
        so,
        "NVRTC {}.{}; kernel sources hash {:016x}",
        rep.nvrtc.0, rep.nvrtc.1, rep.sources_hash
    );
    for c in &rep.compiled {
        let entries = c.entries();
        match &c.cubin {
            Some(bin) => {
                let _ = writeln!(so, "{:<12} {:<12} CUBIN, {} bytes", c.file, c.arch, bin.len());
            }
            None => {
                let _ = writeln!(
                    so,
                    "{:<12} {:<12} {:>3} kernels  {}",
                    c.file,
                    c.arch,
                    entries.len(),
                    entries.join(" ")
                );
            }
        }
        if !c.log.is_empty() {
            eprintln!("{} ({}): {}", c.file, c.arch, c.log.replace('\n', " | "));
        }
        if let Some(d) = &a.out {
            let num = c.arch.trim_start_matches("compute_").trim_start_matches("sm_");
            let stem = c.file.trim_end_matches(".cu");
            let (p, bytes) = match &c.cubin {
                Some(bin) => (d.join(format!("{stem}.sm_{num}.cubin")), bin.as_slice()),
                None => (d.join(format!("{stem}.sm_{num}.ptx")), c.ptx.as_bytes()),
            };
            std::fs::write(&p, bytes).map_err(|e| Error::io(p.display().to_string(), e))?;
        }
    }
    let dirty = rep.with_warnings();
    if dirty.is_empty() {
        Ok(())
    } else {
        Err(Error::DeviceUnavailable {
            backend: "nvrtc".into(),
            msg: format!("warnings in {}", dirty.join(", ")),
        })
    }
}

/// Runs `ctxprune gpu-check`.
pub fn gpu_check(a: GpuCheckArgs) -> Result<()> {
    let rep = ctxprune::gpu_check::run(a.device, a.seed, !a.no_timing, &engine_options())?;
    print!("{rep}");
    let fails = rep.failures();
    if fails.is_empty() {
        Ok(())
    } else {
        Err(Error::DeviceFailed {
            backend: format!("cuda:{}", a.device),
            msg: format!(
                "gpu-check failed {} comparison(s): {}",
                fails.len(),
                fails
                    .iter()
                    .map(|c| c.what.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        })
    }
}
