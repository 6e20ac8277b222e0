//! The raw device emulated on the CPU (feature `cuda-emu`; tests and CI only): the same
//! API as `cuda.rs`, with buffers in host memory, copies as memcpy, the GEMM answered by
//! the CPU's (faer), and every launch calling the kernel compiled as C++ (build.rs,
//! kernels/emu/) with exactly the arguments the CUDA path pushes: both launch functions
//! are generated from kernels/kernels.tbl, and each C++ trampoline checks at compile time
//! that the kernel's signature is the table's.

use super::{failed, GemmType, Grid};
use crate::error::{Error, Result};
use std::marker::PhantomData;
use std::sync::Arc;

/// Launches per kernel since the process started (what CI reports as "executed").
static LAUNCHES: std::sync::Mutex<std::collections::BTreeMap<&'static str, u64>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

thread_local! {
    /// This thread's launches left before an injected failure (tests: a launch that fails
    /// half-way through a step); `u64::MAX` for none.
    static FAIL_AFTER: std::cell::Cell<u64> = const { std::cell::Cell::new(u64::MAX) };
    /// How this thread's launches run their threads: 0 fibers (the default), 1 OS threads.
    /// Per calling thread (a launch runs on its caller), so tests running side by side
    /// keep their own.
    static MODE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Makes this thread's launch after its next `after` ones fail (as a kernel fault would),
/// once.
#[cfg(test)]
pub(crate) fn inject_launch_failure(after: u64) {
    FAIL_AFTER.with(|f| f.set(after));
}

/// True when this launch is the injected failure.
fn injected_failure() -> bool {
    FAIL_AFTER.with(|f| match f.get() {
        u64::MAX => false,
        0 => {
            f.set(u64::MAX);
            true
        }
        v => {
            f.set(v - 1);
            false
        }
    })
}

/// Every kernel with the number of times it was launched on the emulator so far.
pub fn launches() -> Vec<(&'static str, u64)> {
    let done = LAUNCHES.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    Funcs::NAMES
        .iter()
        .map(|&n| (n, done.get(n).copied().unwrap_or(0)))
        .collect()
}

/// Runs the emulated kernels' threads, for launches made from this thread, as OS threads
/// (`true`, what the race check needs) or as fibers (`false`, the default: deterministic
/// and much cheaper).
pub fn set_os_threads(on: bool) {
    MODE.with(|m| m.set(u32::from(on)));
}

/// A launch as kernels/emu/emu.h `ctx_emu_grid` reads it.
#[repr(C)]
pub(crate) struct EmuGrid {
    gx: u32,
    gy: u32,
    gz: u32,
    threads: u32,
    mode: u32,
}

/// The emulated driver is always there.
pub(crate) fn driver_present() -> bool {
    true
}

/// One emulated device.
pub(crate) fn device_count() -> std::result::Result<usize, String> {
    Ok(1)
}

/// An emulated context: the kernels are linked in, nothing to load.
pub(crate) struct Context {
    ordinal: usize,
}

/// What the emulated device reports.
pub(crate) struct DeviceProps {
    pub name: String,
    pub cc: (i32, i32),
    pub total_mem: usize,
}

impl Context {
    /// The emulated device `ordinal` (its kernels are compiled in: `load` is not called).
    pub(crate) fn create(
        ordinal: usize,
        _load: &dyn Fn(&DeviceProps) -> std::result::Result<Vec<crate::backend::report::Compiled>, Error>,
        _blas: bool,
    ) -> Result<(Arc<Context>, DeviceProps)> {
        Ok((
            Arc::new(Context { ordinal }),
            DeviceProps {
                name: "ctxprune CUDA emulator (kernels as C++ on the CPU)".into(),
                cc: (0, 0),
                total_mem: 0,
            },
        ))
    }

    /// The emulator answers GEMMs with the CPU's.
    pub(crate) fn has_blas(&self) -> bool {
        true
    }

    /// Free and total device memory: the emulator does not count.
    pub(crate) fn mem_info(&self) -> (usize, usize) {
        (0, 0)
    }

    /// A lane (the emulator's work is synchronous).
    pub(crate) fn lane(self: &Arc<Self>) -> Result<Lane> {
        Ok(Lane { ctx: self.clone() })
    }
}

/// A lane of the emulated device.
pub(crate) struct Lane {
    ctx: Arc<Context>,
}

/// A buffer of `len` elements in host memory (at least one allocated).
pub(crate) struct Buf<T> {
    data: Vec<T>,
    len: usize,
}

/// A read-only range of a [`Buf`] (`const T*`).
pub(crate) struct View<'a, T> {
    ptr: *const T,
    len: usize,
    _b: PhantomData<&'a T>,
}
/// A writable range of a [`Buf`] (`T*`).
pub(crate) struct ViewMut<'a, T> {
    ptr: *mut T,
    len: usize,
    _b: PhantomData<&'a mut T>,
}
/// A nullable `const T*`.
pub(crate) struct NullPtr<'a, T>(Option<View<'a, T>>);

fn check_range(r: &std::ops::Range<usize>, len: usize) {
    assert!(
        r.start <= r.end && r.end <= len,
        "range {r:?} outside a buffer of {len}"
    );
}

impl<T> Buf<T> {
    /// Elements.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
    /// The whole buffer, read-only.
    pub(crate) fn v(&self) -> View<'_, T> {
        self.slice(0..self.len)
    }
    /// Elements `r`, read-only.
    pub(crate) fn slice(&self, r: std::ops::Range<usize>) -> View<'_, T> {
        check_range(&r, self.data.len());
        View {
            ptr: self.data[r.start..].as_ptr(),
            len: r.end - r.start,
            _b: PhantomData,
        }
    }
    /// The whole buffer, writable.
    pub(crate) fn vm(&mut self) -> ViewMut<'_, T> {
        let len = self.len;
        self.slice_mut(0..len)
    }
    /// Elements `r`, writable.
    pub(crate) fn slice_mut(&mut self, r: std::ops::Range<usize>) -> ViewMut<'_, T> {
        check_range(&r, self.data.len());
        ViewMut {
            ptr: self.data[r.start..].as_mut_ptr(),
            len: r.end - r.start,
            _b: PhantomData,
        }
    }
    /// Two disjoint writable halves, split at `mid` (`mid <= len`).
    pub(crate) fn split_mut(&mut self, mid: usize) -> (ViewMut<'_, T>, ViewMut<'_, T>) {
        let mid = mid.min(self.len);
        let (a, b) = self.data.split_at_mut(mid);
        (
            ViewMut {
                ptr: a.as_mut_ptr(),
                len: a.len(),
                _b: PhantomData,
            },
            ViewMut {
                ptr: b.as_mut_ptr(),
                len: b.len(),
                _b: PhantomData,
            },
        )
    }
}

impl<T> View<'_, T> {
    /// Elements.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
    fn as_slice(&self) -> &[T] {
        // SAFETY: `ptr` and `len` come from a live `Buf` borrowed for the view's lifetime
        // (`Buf::slice` checked the range), so they describe initialised elements.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl<T> ViewMut<'_, T> {
    fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: `ptr` and `len` come from a `Buf` borrowed mutably for the view's
        // lifetime (`Buf::slice_mut` or `split_mut` checked the range), so nothing else
        // reads or writes these elements meanwhile.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl<'a, T> NullPtr<'a, T> {
    /// The null pointer.
    pub(crate) fn null() -> Self {
        NullPtr(None)
    }
    /// `b`'s pointer, or null.
    pub(crate) fn of(b: Option<&'a Buf<T>>) -> Self {
        NullPtr(b.map(Buf::v))
    }
}

impl Lane {
    /// The device ordinal.
    pub(crate) fn ordinal(&self) -> usize {
        self.ctx.ordinal
    }

    /// The emulator answers GEMMs with the CPU's.
    pub(crate) fn has_blas(&self) -> bool {
        true
    }

    /// A new buffer holding `h`.
    pub(crate) fn upload<T: Copy + Default>(&self, h: &[T]) -> Result<Buf<T>> {
        if h.is_empty() {
            return self.zeros(0);
        }
        Ok(Buf {
            data: h.to_vec(),
            len: h.len(),
        })
    }

    /// A new zeroed buffer of `n` elements.
    pub(crate) fn zeros<T: Copy + Default>(&self, n: usize) -> Result<Buf<T>> {
        Ok(Buf {
            data: vec![T::default(); n.max(1)],
            len: n,
        })
    }

    /// A new buffer of `n` copies of `v`.
    pub(crate) fn filled<T: Copy + Default>(&self, n: usize, v: T) -> Result<Buf<T>> {
        let mut b = self.zeros(n)?;
        self.fill(&mut b, v)?;
        Ok(b)
    }

    /// Overwrites every element of `b` with `v`.
    pub(crate) fn fill<T: Copy>(&self, b: &mut Buf<T>, v: T) -> Result<()> {
        let n = b.len;
        b.data[..n].iter_mut().for_each(|x| *x = v);
        Ok(())
    }

    /// Copies `h` into the start of `dst` (which must be at least as long).
    pub(crate) fn write<T: Copy>(&self, h: &[T], mut dst: ViewMut<'_, T>) -> Result<()> {
        if dst.len < h.len() {
            return Err(failed(
                self.ctx.ordinal,
                "host-to-device copy",
                "destination too short",
            ));
        }
        dst.as_mut_slice()[..h.len()].copy_from_slice(h);
        Ok(())
    }

    /// Copies `src` into `out` (same length).
    pub(crate) fn read<T: Copy>(&self, src: View<'_, T>, out: &mut [T]) -> Result<()> {
        if src.len != out.len() {
            return Err(failed(self.ctx.ordinal, "device-to-host copy", "length mismatch"));
        }
        out.copy_from_slice(src.as_slice());
        Ok(())
    }

    /// `src` as a new host vector.
    pub(crate) fn download<T: Copy>(&self, src: View<'_, T>) -> Result<Vec<T>> {
        Ok(src.as_slice().to_vec())
    }

    /// Copy of `src` into the start of `dst`.
    pub(crate) fn copy<T: Copy>(&self, src: View<'_, T>, mut dst: ViewMut<'_, T>) -> Result<()> {
        if dst.len < src.len {
            return Err(failed(self.ctx.ordinal, "device copy", "destination too short"));
        }
        dst.as_mut_slice()[..src.len].copy_from_slice(src.as_slice());
        Ok(())
    }

    /// Sets every element of `dst` to zero.
    pub(crate) fn zero<T: Copy + Default>(&self, mut dst: ViewMut<'_, T>) -> Result<()> {
        dst.as_mut_slice().iter_mut().for_each(|x| *x = T::default());
        Ok(())
    }

    /// Nothing is queued: every emulated operation completes before it returns.
    pub(crate) fn sync(&self) -> Result<()> {
        Ok(())
    }

    /// `g = X X^T` (`n × n`, f32) of the row-major `n × d` rows `x` of type `ty`, by the CPU's
    /// GEMM (f32, or f16/bf16 widened to f32 first), as cuBLAS GemmEx computes it on a GPU.
    pub(crate) fn gemm_xxt<T>(
        &self,
        x: View<'_, T>,
        ty: GemmType,
        n: usize,
        d: usize,
        mut g: ViewMut<'_, f32>,
    ) -> Result<()> {
        let o = self.ctx.ordinal;
        if x.len < n * d || g.len < n * n {
            return Err(failed(o, "cublasGemmEx", "buffers smaller than the matrices"));
        }
        let want = match ty {
            GemmType::F32 => std::mem::size_of::<f32>(),
            GemmType::F16 | GemmType::Bf16 => std::mem::size_of::<u16>(),
        };
        if std::mem::size_of::<T>() != want {
            return Err(failed(
                o,
                "cublasGemmEx",
                "element size does not match the data type",
            ));
        }
        let rows: Vec<f32> = match ty {
            // SAFETY: `T` has the size of f32 (checked above) and the callers pass f32 rows
            // with `GemmType::F32`; the view covers `n * d` initialised elements.
            GemmType::F32 => unsafe { std::slice::from_raw_parts(x.ptr.cast::<f32>(), n * d) }.to_vec(),
            GemmType::F16 | GemmType::Bf16 => {
                // SAFETY: `T` has the size of u16 (checked above): the raw bits of the
                // half values; the view covers `n * d` initialised elements.
                let bits = unsafe { std::slice::from_raw_parts(x.ptr.cast::<u16>(), n * d) };
                bits.iter()
                    .map(|&b| {
                        if ty == GemmType::F16 {
                            half::f16::from_bits(b).to_f32()
                        } else {
                            half::bf16::from_bits(b).to_f32()
                        }
                    })
                    .collect()
            }
        };
        crate::backend::cpu::gemm_abt(&rows, &rows, d, &mut g.as_mut_slice()[..n * n], n, true);
        Ok(())
    }
}

/// A kernel argument as the emulated kernel takes it.
trait EmuArg {
    type C;
    fn c(self) -> Self::C;
}
impl<T> EmuArg for View<'_, T> {
    type C = *const T;
    fn c(self) -> *const T {
        self.ptr
    }
}
impl<T> EmuArg for ViewMut<'_, T> {
    type C = *mut T;
    fn c(self) -> *mut T {
        self.ptr
    }
}
impl<T> EmuArg for NullPtr<'_, T> {
    type C = *const T;
    fn c(self) -> *const T {
        self.0.map_or(std::ptr::null(), |v| v.ptr)
    }
}
macro_rules! scalar_args {
    ($($t:ty),*) => {$(
        impl EmuArg for $t {
            type C = $t;
            fn c(self) -> $t {
                self
            }
        }
    )*};
}
scalar_args!(i32, i64, u64, f32, f64);

/// The error of an emulated launch that did not complete.
fn launch_error(ordinal: usize, name: &str, rc: i32) -> Error {
    let why = match rc {
        1 => "a barrier could never release (threads of a block wait at different __syncthreads or shuffles)",
        2 => "bad launch configuration",
        3 => "injected fault (test)",
        _ => "unknown emulator error",
    };
    failed(ordinal, &format!("emulated launch {name}"), why)
}

/// Expands kernels/kernels.tbl (as build.rs writes it) into one launch function per
/// kernel, each calling its C++ trampoline (`ctx_emu_<name>`) with the arguments the CUDA
/// path pushes; the trampoline's declared FFI types must be the argument types' `EmuArg`
/// mapping, and the trampoline itself checks the kernel's C++ signature.
macro_rules! kernels {
    ($( $(#[$m:meta])* fn $name:ident / $emu:ident ( $($arg:ident : $ty:ty => $cty:ty),* $(,)? ); )*) => {
        /// Every kernel of the crate (compiled in).
        pub(crate) struct Funcs;

        impl Funcs {
            /// The kernel names, in table order.
            pub(crate) const NAMES: &'static [&'static str] = &[$(stringify!($name)),*];
        }

        extern "C" {
            $( fn $emu(grid: *const EmuGrid, $($arg: $cty),*) -> i32; )*
        }

        $(
            $(#[$m])*
            #[allow(clippy::too_many_arguments)]
            pub(crate) fn $name(lane: &Lane, grid: Grid, $($arg: $ty),*) -> Result<()> {
                if injected_failure() {
                    return Err(launch_error(lane.ordinal(), stringify!($name), 3));
                }
                let g = EmuGrid {
                    gx: grid.blocks.0,
                    gy: grid.blocks.1,
                    gz: grid.blocks.2,
                    threads: grid.threads,
                    mode: MODE.with(std::cell::Cell::get),
                };
                // SAFETY: the trampoline's C++ signature is generated from the same table
                // as these argument types (and static-asserted against the kernel's own);
                // every pointer comes from a live buffer borrowed for this call, at least as
                // long as the ranges the kernel indexes for the sizes passed (checked by
                // the callers, as for a GPU), and nullable pointers are null or live.
                let rc = unsafe { $emu(&g, $(EmuArg::c($arg)),*) };
                *LAUNCHES
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .entry(stringify!($name))
                    .or_insert(0) += 1;
                if rc == 0 {
                    Ok(())
                } else {
                    Err(launch_error(lane.ordinal(), stringify!($name), rc))
                }
            }
        )*
    };
}

// One typed launch function per kernel of kernels/kernels.tbl (generated by build.rs).
include!(concat!(env!("OUT_DIR"), "/kernel_table.rs"));
