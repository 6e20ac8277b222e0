//! The CUDA backend of a build without the `cuda` feature: the same names as the real
//! module, a device type with no values (so every match over devices stays exhaustive
//! and its CUDA arms are statically unreachable), and opens that say why CUDA is absent.

use super::gp::{GpStore, PoolKernel, RowReader};
use super::picker::{Picker, PickerInputs, PickerKind, Rows};
use super::report::{CheckReport, KernelsReport};
use super::EngineOptions;
use crate::embeddings::{Embeddings, Matrix};
use crate::error::{Error, Result};
use crate::rng::Rng;
use crate::similarity::Kernel;

#[derive(Clone, Copy)]
enum Void {}

fn absent() -> Error {
    Error::DeviceUnavailable {
        backend: "cuda".into(),
        msg: "this build has no CUDA support (built without the `cuda` feature)".into(),
    }
}

/// A CUDA device (none exist in this build).
#[derive(Clone)]
pub struct Device(Void);

/// A pool resident on a CUDA device (none exist in this build).
pub struct DevRows(Void);

/// A half-precision pool resident on a CUDA device (none exist in this build).
pub struct HalfRows(Void);

impl HalfRows {
    /// How the rows are stored.
    #[must_use]
    pub fn storage(&self) -> super::Storage {
        match self.0 {}
    }
}

impl Device {
    /// Always an error: this build has no CUDA support.
    pub fn open(_ordinal: usize, _opts: &EngineOptions) -> Result<Device> {
        Err(absent())
    }
    /// The device ordinal.
    #[must_use]
    pub fn ordinal(&self) -> usize {
        match self.0 {}
    }
    /// One line naming the device.
    #[must_use]
    pub fn describe(&self) -> String {
        match self.0 {}
    }
}

pub(crate) fn gram(d: &Device, _: &Embeddings, _: Kernel) -> Result<Vec<f32>> {
    match d.0 {}
}

pub(crate) fn gram_rows(d: &Device, _: &DevRows, _: Kernel) -> Result<Vec<f32>> {
    match d.0 {}
}

pub(crate) fn gram_half(d: &Device, _: &HalfRows, _: Kernel) -> Result<Vec<f32>> {
    match d.0 {}
}

pub(crate) fn upload_half_rows(d: &Device, _: Matrix<'_>, _: super::Storage) -> Result<HalfRows> {
    match d.0 {}
}

pub(crate) fn gram_batched(d: &Device, _: &[&Embeddings], _: Kernel) -> Result<Vec<Vec<f32>>> {
    match d.0 {}
}

pub(crate) fn upload_rows(d: &Device, _: Matrix<'_>, _: &[f64]) -> Result<DevRows> {
    match d.0 {}
}

pub(crate) fn greedy_picker<'a>(
    d: &Device,
    _: &'a DevRows,
    _: &Rows<'a>,
    _: PickerKind,
    _: &PickerInputs<'_>,
) -> Result<Box<dyn Picker + 'a>> {
    match d.0 {}
}

pub(crate) fn gp_store<'a>(
    d: &Device,
    _: &'a DevRows,
    _: &'a PoolKernel<'a>,
    _: &[f64],
) -> Result<Box<dyn GpStore + 'a>> {
    match d.0 {}
}

pub(crate) fn kernel_row_reader<'a>(
    d: &Device,
    _: &'a DevRows,
    _: &'a PoolKernel<'a>,
) -> Result<Box<dyn RowReader + 'a>> {
    match d.0 {}
}

pub(crate) fn compile_kernels(_: &[String], _: &EngineOptions) -> Result<KernelsReport> {
    Err(Error::unsupported(
        "cuda",
        "compiling CUDA kernels in a build without the `cuda` feature",
    ))
}

/// The device half of `ctxprune gpu-check`.
pub mod check {
    use super::*;

    pub(crate) fn header(d: &Device) -> String {
        match d.0 {}
    }
    pub(crate) fn primitives(d: &Device, _: &mut Rng, _: &mut CheckReport) -> Result<()> {
        match d.0 {}
    }
    pub(crate) fn timings(d: &Device, _: &mut Rng, _: &mut CheckReport) -> Result<()> {
        match d.0 {}
    }
}

/// Attention mass on a device (none exist in this build).
pub(crate) fn attention_mass(
    d: &Device,
    _qk: &crate::qk::Qk,
    _piece: &[u32],
    _np: usize,
) -> Result<Vec<f64>> {
    match d.0 {}
}
