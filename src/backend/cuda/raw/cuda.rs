//! The raw device on a real GPU through cudarc 0.19: context, lanes, buffers, copies,
//! cuBLAS, and the typed launch of every kernel.

use super::{failed, GemmType, Grid};
use crate::error::{Error, Result};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DeviceRepr,
    LaunchArgs, PushKernelArg, ValidAsZeroBits,
};
use std::sync::{Arc, Mutex};

/// True when the CUDA driver library can be opened (cudarc panics on first use when it
/// cannot, so this is asked first).
pub(crate) fn driver_present() -> bool {
    // SAFETY: is_culib_present only tries to dlopen the driver library by its known names
    // and closes it again; it has no preconditions.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Number of CUDA devices (the driver library must be present: [`driver_present`]).
pub(crate) fn device_count() -> std::result::Result<usize, String> {
    cudarc::driver::result::init().map_err(|e| format!("cuInit failed: {e}"))?;
    let n =
        cudarc::driver::result::device::get_count().map_err(|e| format!("cuDeviceGetCount failed: {e}"))?;
    Ok(usize::try_from(n).unwrap_or(0))
}

// --- context and lanes ------------------------------------------------------------------

struct LaneState {
    stream: Arc<CudaStream>,
    /// Created on the lane's first GEMM (most lanes never run one).
    blas: std::cell::OnceCell<cudarc::cublas::CudaBlas>,
}

/// A device context with the crate's kernels loaded, and its idle lanes.
pub(crate) struct Context {
    ordinal: usize,
    ctx: Arc<CudaContext>,
    funcs: Funcs,
    blas: bool,
    idle: Mutex<Vec<LaneState>>,
}

/// What the driver says about a device.
pub(crate) struct DeviceProps {
    pub name: String,
    pub cc: (i32, i32),
    pub total_mem: usize,
}

impl Context {
    /// A context on device `ordinal` (the driver must be present and `ordinal` below
    /// [`device_count`]) with the modules `modules` (PTX texts) loaded; every kernel of
    /// the table must be found in them.
    pub(crate) fn create(
        ordinal: usize,
        load: &dyn Fn(&DeviceProps) -> std::result::Result<Vec<crate::backend::report::Compiled>, Error>,
        blas: bool,
    ) -> Result<(Arc<Context>, DeviceProps)> {
        let unavailable = |msg: String| Error::DeviceUnavailable {
            backend: format!("cuda:{ordinal}"),
            msg,
        };
        let ctx = CudaContext::new(ordinal)
            .map_err(|e| unavailable(format!("context on device {ordinal}: {e}")))?;
        // SAFETY: the crate never shares a buffer between streams while either is working
        // on it (a pool is uploaded and synchronised before any lane reads it; every other
        // buffer belongs to one lane), so the cross-stream event tracking this turns off
        // is never needed.
        unsafe { ctx.disable_event_tracking() };
        let props = DeviceProps {
            name: ctx.name().unwrap_or_else(|_| "unknown".into()),
            cc: ctx
                .compute_capability()
                .map_err(|e| unavailable(format!("compute capability: {e}")))?,
            total_mem: ctx.total_mem().unwrap_or(0),
        };
        let mut loaded = Vec::new();
        for c in load(&props)? {
            let (module, what) = match c.cubin {
                Some(bin) => (cudarc::nvrtc::Ptx::from_binary(bin), "CUBIN"),
                None => (cudarc::nvrtc::Ptx::from_src(c.ptx), "PTX"),
            };
            let m = ctx
                .load_module(module)
                .map_err(|e| unavailable(format!("loading the {what} of {} for {}: {e}", c.file, c.arch)))?;
            loaded.push(m);
        }
        let funcs = Funcs::load(&|name: &str| {
            loaded
                .iter()
                .find_map(|m| m.load_function(name).ok())
                .ok_or_else(|| unavailable(format!("kernel '{name}' is not in the compiled modules")))
        })?;
        Ok((
            Arc::new(Context {
                ordinal,
                ctx,
                funcs,
                blas,
                idle: Mutex::new(Vec::new()),
            }),
            props,
        ))
    }

    /// True when cuBLAS was loaded for this context.
    pub(crate) fn has_blas(&self) -> bool {
        self.blas
    }

    /// Free and total device memory in bytes.
    pub(crate) fn mem_info(&self) -> (usize, usize) {
        self.ctx.mem_get_info().unwrap_or((0, 0))
    }

    /// A lane (a stream, with its cuBLAS handle when cuBLAS is loaded) for one request:
    /// an idle one, or a new one. It returns to the idle list when dropped.
    pub(crate) fn lane(self: &Arc<Self>) -> Result<Lane> {
        let reuse = self
            .idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop();
        let st = match reuse {
            Some(s) => s,
            None => LaneState {
                stream: self
                    .ctx
                    .new_stream()
                    .map_err(|e| failed(self.ordinal, "new stream", e))?,
                blas: std::cell::OnceCell::new(),
            },
        };
        Ok(Lane {
            ctx: self.clone(),
            st: Some(st),
        })
    }
}

/// One stream of a device, checked out by one request; work queued on it runs in order.
pub(crate) struct Lane {
    ctx: Arc<Context>,
    st: Option<LaneState>,
}

impl Drop for Lane {
    fn drop(&mut self) {
        if let Some(st) = self.st.take() {
            // A lane goes back idle only once its work is done and its stream healthy.
            if st.stream.synchronize().is_ok() {
                let mut idle = self
                    .ctx
                    .idle
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if idle.len() < 64 {
                    idle.push(st);
                }
            }
        }
    }
}

/// A device buffer of `len` elements (allocated with at least one, so a zero-length
/// buffer is a valid pointer).
pub(crate) struct Buf<T> {
    s: CudaSlice<T>,
    len: usize,
}

/// A read-only range of a [`Buf`], as a kernel argument (`const T*`).
pub(crate) struct View<'a, T>(CudaView<'a, T>);
/// A writable range of a [`Buf`], as a kernel argument (`T*`).
pub(crate) struct ViewMut<'a, T>(CudaViewMut<'a, T>);
/// A nullable `const T*` kernel argument.
pub(crate) struct NullPtr<'a, T>(Option<View<'a, T>>);

impl<T> Buf<T> {
    /// Elements.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
    /// The whole buffer, read-only.
    pub(crate) fn v(&self) -> View<'_, T> {
        View(self.s.slice(0..self.len))
    }
    /// Elements `r`, read-only.
    pub(crate) fn slice(&self, r: std::ops::Range<usize>) -> View<'_, T> {
        View(self.s.slice(r))
    }
    /// The whole buffer, writable.
    pub(crate) fn vm(&mut self) -> ViewMut<'_, T> {
        let len = self.len;
        ViewMut(self.s.slice_mut(0..len))
    }
    /// Elements `r`, writable.
    pub(crate) fn slice_mut(&mut self, r: std::ops::Range<usize>) -> ViewMut<'_, T> {
        ViewMut(self.s.slice_mut(r))
    }
    /// Two disjoint writable halves, split at `mid` (`mid <= len`).
    pub(crate) fn split_mut(&mut self, mid: usize) -> (ViewMut<'_, T>, ViewMut<'_, T>) {
        let (a, b) = self.s.split_at_mut(mid.min(self.len));
        (ViewMut(a), ViewMut(b))
    }
}

impl<T> View<'_, T> {
    /// Elements.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
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
    fn stream(&self) -> &Arc<CudaStream> {
        // A lane always holds its state until dropped.
        self.st
            .as_ref()
            .map(|s| &s.stream)
            .expect("lane state present until drop")
    }

    fn fail(&self, what: &str) -> impl Fn(cudarc::driver::DriverError) -> Error + '_ {
        let o = self.ctx.ordinal;
        let what = what.to_string();
        move |e| failed(o, &what, e)
    }

    /// The device ordinal.
    pub(crate) fn ordinal(&self) -> usize {
        self.ctx.ordinal
    }

    /// True when cuBLAS is loaded (this lane creates its handle on its first GEMM).
    pub(crate) fn has_blas(&self) -> bool {
        self.ctx.blas
    }

    /// A new buffer holding `h`.
    pub(crate) fn upload<T: DeviceRepr + ValidAsZeroBits>(&self, h: &[T]) -> Result<Buf<T>> {
        if h.is_empty() {
            return self.zeros(0);
        }
        let s = self
            .stream()
            .clone_htod(h)
            .map_err(self.fail("host-to-device copy"))?;
        Ok(Buf { s, len: h.len() })
    }

    /// A new zeroed buffer of `n` elements.
    pub(crate) fn zeros<T: DeviceRepr + ValidAsZeroBits>(&self, n: usize) -> Result<Buf<T>> {
        let s = self
            .stream()
            .alloc_zeros(n.max(1))
            .map_err(self.fail("device allocation"))?;
        Ok(Buf { s, len: n })
    }

    /// A new buffer of `n` copies of `v`.
    pub(crate) fn filled<T: DeviceRepr + ValidAsZeroBits + Clone>(&self, n: usize, v: T) -> Result<Buf<T>> {
        let mut b = self.zeros(n)?;
        self.fill(&mut b, v)?;
        Ok(b)
    }

    /// Overwrites every element of `b` with `v`.
    pub(crate) fn fill<T: DeviceRepr + Clone>(&self, b: &mut Buf<T>, v: T) -> Result<()> {
        if b.len == 0 {
            return Ok(());
        }
        let h = vec![v; b.len];
        let mut dst = b.s.slice_mut(0..b.len);
        self.stream()
            .memcpy_htod(&h, &mut dst)
            .map_err(self.fail("host-to-device copy"))
    }

    /// Copies `h` into the start of `dst` (which must be at least as long).
    pub(crate) fn write<T: DeviceRepr>(&self, h: &[T], dst: ViewMut<'_, T>) -> Result<()> {
        if h.is_empty() {
            return Ok(());
        }
        let mut d = dst.0;
        if d.len() < h.len() {
            return Err(failed(
                self.ctx.ordinal,
                "host-to-device copy",
                "destination too short",
            ));
        }
        let mut d = d.slice_mut(0..h.len());
        self.stream()
            .memcpy_htod(h, &mut d)
            .map_err(self.fail("host-to-device copy"))
    }

    /// Copies `src` into `out` (same length) and waits for it: the copy is into pageable
    /// host memory, which the driver completes before returning (pinned memory would not
    /// wait; this crate never passes any).
    pub(crate) fn read<T: DeviceRepr>(&self, src: View<'_, T>, out: &mut [T]) -> Result<()> {
        if out.is_empty() {
            return Ok(());
        }
        if src.0.len() != out.len() {
            return Err(failed(self.ctx.ordinal, "device-to-host copy", "length mismatch"));
        }
        self.stream()
            .memcpy_dtoh(&src.0, out)
            .map_err(self.fail("device-to-host copy"))
    }

    /// `src` as a new host vector (waits for it).
    pub(crate) fn download<T: DeviceRepr + Default + Clone>(&self, src: View<'_, T>) -> Result<Vec<T>> {
        let mut out = vec![T::default(); src.0.len()];
        self.read(src, &mut out)?;
        Ok(out)
    }

    /// Device-to-device copy of `src` into the start of `dst`.
    pub(crate) fn copy<T: DeviceRepr>(&self, src: View<'_, T>, dst: ViewMut<'_, T>) -> Result<()> {
        let n = src.0.len();
        if n == 0 {
            return Ok(());
        }
        let mut d = dst.0;
        if d.len() < n {
            return Err(failed(self.ctx.ordinal, "device copy", "destination too short"));
        }
        let mut d = d.slice_mut(0..n);
        self.stream()
            .memcpy_dtod(&src.0, &mut d)
            .map_err(self.fail("device copy"))
    }

    /// Sets every element of `dst` to zero.
    pub(crate) fn zero<T: DeviceRepr + ValidAsZeroBits>(&self, dst: ViewMut<'_, T>) -> Result<()> {
        let mut d = dst.0;
        if d.is_empty() {
            return Ok(());
        }
        self.stream().memset_zeros(&mut d).map_err(self.fail("memset"))
    }

    /// Waits for every operation queued on this lane.
    pub(crate) fn sync(&self) -> Result<()> {
        self.stream()
            .synchronize()
            .map_err(self.fail("stream synchronize"))
    }

    /// `g = X X^T` (`n × n`, f32) for the row-major `n × d` matrix `x` of element type
    /// `ty` by cuBLAS GemmEx in f32 compute (SGEMM for f32 rows, tensor cores for f16 and
    /// bf16 rows, f32 accumulation and output).
    pub(crate) fn gemm_xxt<T>(
        &self,
        x: View<'_, T>,
        ty: GemmType,
        n: usize,
        d: usize,
        g: ViewMut<'_, f32>,
    ) -> Result<()> {
        use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType};
        let o = self.ctx.ordinal;
        if !self.ctx.blas {
            return Err(Error::unsupported(
                format!("cuda:{o}"),
                "cuBLAS GEMM without cuBLAS",
            ));
        }
        let st = self
            .st
            .as_ref()
            .ok_or_else(|| failed(o, "cublasGemmEx", "lane already returned"))?;
        let blas = match st.blas.get() {
            Some(b) => b,
            None => {
                let b = cudarc::cublas::CudaBlas::new(st.stream.clone())
                    .map_err(|e| failed(o, "cuBLAS handle", e))?;
                st.blas.get_or_init(|| b)
            }
        };
        let (ni, di) = (
            i32::try_from(n).map_err(|_| Error::invalid("rows", format!("{n} is above 2^31")))?,
            i32::try_from(d).map_err(|_| Error::invalid("dim", format!("{d} is above 2^31")))?,
        );
        if x.0.len() < n * d || g.0.len() < n * n {
            return Err(failed(o, "cublasGemmEx", "buffers smaller than the matrices"));
        }
        let ty = match ty {
            GemmType::F32 => cudaDataType::CUDA_R_32F,
            GemmType::F16 => cudaDataType::CUDA_R_16F,
            GemmType::Bf16 => cudaDataType::CUDA_R_16BF,
        };
        // cuBLAS runs in the calling thread's current context: make it this device's.
        self.ctx.ctx.bind_to_thread().map_err(self.fail("bind context"))?;
        let (alpha, beta) = (1.0f32, 0.0f32);
        let stream = self.stream();
        let (a, _ga) = x.0.device_ptr(stream);
        let mut gv = g.0;
        let (c, _gc) = cudarc::driver::DevicePtrMut::device_ptr_mut(&mut gv, stream);
        // SAFETY: the row-major n × d matrix is a column-major d × n matrix X; C (n × n,
        // f32) = X^T X reads n·d elements of `x` (of type `ty`) and writes n·n floats of `g`
        // (both lengths checked above); compute in f32, so alpha and beta are f32 locals
        // that outlive the call; the handle is bound to this lane's stream.
        unsafe {
            cudarc::cublas::result::gemm_ex(
                *blas.handle(),
                cublasOperation_t::CUBLAS_OP_T,
                cublasOperation_t::CUBLAS_OP_N,
                ni,
                ni,
                di,
                (&alpha as *const f32).cast(),
                a as *const std::ffi::c_void,
                ty,
                di,
                a as *const std::ffi::c_void,
                ty,
                di,
                (&beta as *const f32).cast(),
                c as *mut std::ffi::c_void,
                cudaDataType::CUDA_R_32F,
                ni,
                cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| failed(o, "cublasGemmEx", format!("{e:?}")))
    }
}

// --- kernel arguments ---------------------------------------------------------------------

/// A kernel argument as the caller gives it, turned into what is pushed.
trait Arg<'a> {
    type Pushed: Push;
    fn prep(self, stream: &CudaStream) -> Self::Pushed;
}
/// A prepared kernel argument.
trait Push {
    fn push<'b>(&'b mut self, b: &mut LaunchArgs<'b>);
}

impl<'a, T> Arg<'a> for View<'a, T> {
    type Pushed = CudaView<'a, T>;
    fn prep(self, _: &CudaStream) -> CudaView<'a, T> {
        self.0
    }
}
impl<'a, T> Arg<'a> for ViewMut<'a, T> {
    type Pushed = CudaViewMut<'a, T>;
    fn prep(self, _: &CudaStream) -> CudaViewMut<'a, T> {
        self.0
    }
}
impl<'a, T> Arg<'a> for NullPtr<'a, T> {
    type Pushed = u64;
    fn prep(self, stream: &CudaStream) -> u64 {
        self.0.map_or(0, |v| v.0.device_ptr(stream).0)
    }
}
impl<T> Push for CudaView<'_, T> {
    fn push<'b>(&'b mut self, b: &mut LaunchArgs<'b>) {
        b.arg(&*self);
    }
}
impl<T> Push for CudaViewMut<'_, T> {
    fn push<'b>(&'b mut self, b: &mut LaunchArgs<'b>) {
        b.arg(self);
    }
}
macro_rules! scalar_args {
    ($($t:ty),*) => {$(
        impl<'a> Arg<'a> for $t {
            type Pushed = $t;
            fn prep(self, _: &CudaStream) -> $t {
                self
            }
        }
        impl Push for $t {
            fn push<'b>(&'b mut self, b: &mut LaunchArgs<'b>) {
                b.arg(&*self);
            }
        }
    )*};
}
scalar_args!(i32, i64, u64, f32, f64);

/// Expands kernels/kernels.tbl (as build.rs writes it: each kernel's name, its emulator
/// trampoline's name, and its `extern "C"` signature's arguments in order, `View` =
/// `const T*`, `ViewMut` = `T*`, `NullPtr` = nullable `const T*`, scalars by value) into
/// [`Funcs`] (every kernel looked up when a device opens) and one launch function per
/// kernel, `name(lane, grid, args...)`.
macro_rules! kernels {
    ($( $(#[$m:meta])* fn $name:ident / $emu:ident ( $($arg:ident : $ty:ty => $cty:ty),* $(,)? ); )*) => {
        /// Every kernel of the crate, loaded from the compiled modules.
        pub(crate) struct Funcs {
            $( $name: CudaFunction, )*
        }

        impl Funcs {
            /// The kernel names, in table order.
            pub(crate) const NAMES: &'static [&'static str] = &[$(stringify!($name)),*];

            fn load(get: &dyn Fn(&str) -> Result<CudaFunction>) -> Result<Funcs> {
                Ok(Funcs { $( $name: get(stringify!($name))?, )* })
            }
        }

        $(
            $(#[$m])*
            #[allow(clippy::too_many_arguments)]
            pub(crate) fn $name(lane: &Lane, grid: Grid, $($arg: $ty),*) -> Result<()> {
                let stream = lane.stream();
                $( let mut $arg = Arg::prep($arg, stream); )*
                let f = &lane.ctx.funcs.$name;
                let mut b = stream.launch_builder(f);
                $( Push::push(&mut $arg, &mut b); )*
                let cfg = cudarc::driver::LaunchConfig {
                    grid_dim: grid.blocks,
                    block_dim: (grid.threads, 1, 1),
                    shared_mem_bytes: 0,
                };
                // SAFETY: the arguments are pushed in the order and with the types of the
                // kernel's extern "C" signature (this table is that signature); every
                // buffer is a live allocation of this device, at least as long as the
                // ranges the kernel indexes for the sizes passed (checked by the callers),
                // and nullable pointers are 0 or live.
                unsafe { b.launch(cfg) }
                    .map(|_| ())
                    .map_err(|e| failed(lane.ordinal(), concat!("launch ", stringify!($name)), e))
            }
        )*
    };
}

// One typed launch function per kernel of kernels/kernels.tbl (generated by build.rs).
include!(concat!(env!("OUT_DIR"), "/kernel_table.rs"));
