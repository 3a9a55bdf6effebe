//! [`Device`] on a CUDA GPU, through cudarc's driver API (loaded at run
//! time: nothing CUDA is needed to build). One primary context, one
//! non-default stream that Rust owns, event tracking off (no hidden waits
//! between launches), the persisting-L2 limit at 0, modules loaded from
//! cubin bytes (`cuModuleLoadData`), launches through `cuLaunchKernel` with
//! one pointer per packed parameter, and timing by two events recorded
//! around the launch alone.
//!
//! cudarc panics when a driver symbol is called without the library, so
//! [`CudaDevice::open`] probes for it first and answers
//! [`DeviceError::NoDriver`] (the gate's `needs-gpu`), never a panic.
//!
//! The census comes from CUPTI's kernel activity records when kidiom is
//! built with the `cupti` feature and the library loads (`super::cupti`);
//! otherwise [`Device::census`] answers `None` and the gate notes it.

use std::ffi::{CString, c_void};
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaEvent, CudaStream, result, sys};

use super::device::{Arg, BufferId, Device, DeviceError, KernelId};
use super::spec::LaunchSpec;

/// Dynamic shared memory above this needs the function's opt-in attribute.
const DEFAULT_SHARED_LIMIT: u32 = 48 * 1024;

fn drv(call: &str) -> impl Fn(result::DriverError) -> DeviceError + '_ {
    move |e| DeviceError::Driver { call: call.to_string(), error: e.to_string() }
}

/// Whether the CUDA driver library can be loaded here (no CUDA call is made).
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the library's candidate names.
    unsafe { sys::is_culib_present() }
}

struct Kernel {
    module: sys::CUmodule,
    function: sys::CUfunction,
    name: String,
    grid: [u32; 3],
    block: [u32; 3],
    shared: u32,
}

/// A CUDA GPU.
pub struct CudaDevice {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    start: CudaEvent,
    end: CudaEvent,
    buffers: Vec<(sys::CUdeviceptr, usize)>,
    kernels: Vec<Kernel>,
    flush: (sys::CUdeviceptr, usize),
    l2: usize,
    name: String,
    #[cfg(feature = "cupti")]
    census: Option<super::cupti::Census>,
}

impl CudaDevice {
    /// Opens device `ordinal`: [`DeviceError::NoDriver`] without the driver
    /// library, [`DeviceError::NoDevice`] when the driver has no such device.
    pub fn open(ordinal: usize) -> Result<CudaDevice, DeviceError> {
        if !driver_present() {
            return Err(DeviceError::NoDriver);
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| DeviceError::NoDevice(e.to_string()))?;
        // A kernel's access-policy window cannot keep its working set in L2 across the flush.
        ctx.set_limit(sys::CUlimit::CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 0)
            .map_err(drv("cuCtxSetLimit(persisting L2, 0)"))?;
        // SAFETY: the gate uses one stream only, and frees nothing while work is queued on it.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(drv("cuStreamCreate"))?;
        let timing = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = ctx.new_event(timing).map_err(drv("cuEventCreate"))?;
        let end = ctx.new_event(timing).map_err(drv("cuEventCreate"))?;
        let l2 = ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE).map_err(drv("L2 size"))?;
        let l2 = usize::try_from(l2).unwrap_or(0).max(1 << 20);
        let name = result::device::get_name(ctx.cu_device()).unwrap_or_else(|_| format!("cuda:{ordinal}"));
        // SAFETY: a fresh allocation on the bound context, freed once in Drop.
        let flush = unsafe { result::malloc_sync(2 * l2) }.map_err(drv("cuMemAlloc (L2 flush buffer)"))?;
        Ok(CudaDevice {
            ctx,
            stream,
            start,
            end,
            buffers: Vec::new(),
            kernels: Vec::new(),
            flush: (flush, 2 * l2),
            l2,
            name,
            // without it the census is `None` and the gate says it was not observed
            #[cfg(feature = "cupti")]
            census: super::cupti::Census::start().ok(),
        })
    }

    fn bind(&self) -> Result<(), DeviceError> {
        self.ctx.bind_to_thread().map_err(drv("cuCtxSetCurrent"))
    }

    fn span(&self, buf: BufferId, offset: usize, len: usize) -> Result<sys::CUdeviceptr, DeviceError> {
        let &(ptr, size) =
            self.buffers.get(buf.0).ok_or_else(|| DeviceError::OutOfBounds(format!("no buffer {}", buf.0)))?;
        if offset.checked_add(len).is_none_or(|e| e > size) {
            return Err(DeviceError::OutOfBounds(format!("{len} bytes at {offset} of a {size}-byte buffer")));
        }
        Ok(ptr + offset as u64)
    }
}

impl Device for CudaDevice {
    fn describe(&self) -> String {
        format!("{} (cuda, cudarc driver API)", self.name)
    }

    fn l2_bytes(&self) -> usize {
        self.l2
    }

    fn alloc(&mut self, bytes: usize) -> Result<BufferId, DeviceError> {
        self.bind()?;
        // SAFETY: a fresh allocation (256-byte aligned by the driver), freed once in Drop.
        let ptr = unsafe { result::malloc_sync(bytes.max(1)) }.map_err(drv("cuMemAlloc"))?;
        self.buffers.push((ptr, bytes));
        Ok(BufferId(self.buffers.len() - 1))
    }

    fn upload(&mut self, buf: BufferId, offset: usize, bytes: &[u8]) -> Result<(), DeviceError> {
        let dst = self.span(buf, offset, bytes.len())?;
        self.bind()?;
        // SAFETY: `dst` spans `bytes.len()` bytes of a live allocation; the copy
        // finishes before `bytes` can go away (synchronised below).
        unsafe { result::memcpy_htod_async(dst, bytes, self.stream.cu_stream()) }.map_err(drv("cuMemcpyHtoDAsync"))?;
        self.stream.synchronize().map_err(drv("cuStreamSynchronize"))
    }

    fn download(&mut self, buf: BufferId, offset: usize, out: &mut [u8]) -> Result<(), DeviceError> {
        let src = self.span(buf, offset, out.len())?;
        self.bind()?;
        // SAFETY: `src` spans `out.len()` bytes of a live allocation; synchronised before `out` is read.
        unsafe { result::memcpy_dtoh_async(out, src, self.stream.cu_stream()) }.map_err(drv("cuMemcpyDtoHAsync"))?;
        self.stream.synchronize().map_err(drv("cuStreamSynchronize"))
    }

    fn fill(&mut self, buf: BufferId, offset: usize, words: usize, word: u32) -> Result<(), DeviceError> {
        if !offset.is_multiple_of(4) {
            return Err(DeviceError::OutOfBounds(format!("a 32-bit fill at byte {offset}")));
        }
        let dst = self.span(buf, offset, words * 4)?;
        self.bind()?;
        // SAFETY: `dst` spans `words` 32-bit words of a live allocation, 4-byte aligned.
        unsafe { sys::cuMemsetD32Async(dst, word, words, self.stream.cu_stream()) }
            .result()
            .map_err(drv("cuMemsetD32Async"))
    }

    fn flush_l2(&mut self) -> Result<(), DeviceError> {
        self.bind()?;
        // SAFETY: the flush buffer is live and `self.flush.1` bytes long.
        unsafe { result::memset_d8_async(self.flush.0, 0, self.flush.1, self.stream.cu_stream()) }
            .map_err(drv("cuMemsetD8Async (L2 flush)"))?;
        // SAFETY: no arguments; resets lines a kernel marked persisting.
        unsafe { sys::cuCtxResetPersistingL2Cache() }.result().map_err(drv("cuCtxResetPersistingL2Cache"))
    }

    fn load(&mut self, spec: &LaunchSpec, cubin: &[u8]) -> Result<KernelId, DeviceError> {
        self.bind()?;
        // cuModuleLoadData reads an ELF image up to its own end: give it the bytes, whole.
        // SAFETY: `cubin` is a live buffer for the call; the driver copies what it keeps.
        let module =
            unsafe { result::module::load_data(cubin.as_ptr() as *const c_void) }.map_err(drv("cuModuleLoadData"))?;
        let name = CString::new(spec.kernel.as_str()).map_err(|_| DeviceError::NoKernel(spec.kernel.clone()))?;
        // SAFETY: `module` was just loaded.
        let function = match unsafe { result::module::get_function(module, name) } {
            Ok(f) => f,
            Err(_) => {
                // SAFETY: loaded above, unloaded once.
                let _ = unsafe { result::module::unload(module) };
                return Err(DeviceError::NoKernel(spec.kernel.clone()));
            }
        };
        if spec.shared_bytes > DEFAULT_SHARED_LIMIT {
            let shared = i32::try_from(spec.shared_bytes).unwrap_or(i32::MAX);
            let attr = sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
            // SAFETY: `function` belongs to the live `module`.
            unsafe { result::function::set_function_attribute(function, attr, shared) }
                .map_err(drv("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)"))?;
        }
        self.kernels.push(Kernel {
            module,
            function,
            name: spec.kernel.clone(),
            grid: spec.grid,
            block: spec.block,
            shared: spec.shared_bytes,
        });
        Ok(KernelId(self.kernels.len() - 1))
    }

    fn timed_launch(&mut self, kernel: KernelId, args: &[Arg]) -> Result<f64, DeviceError> {
        let k = self.kernels.get(kernel.0).ok_or_else(|| DeviceError::NoKernel(format!("#{}", kernel.0)))?;
        if let Some(Arg::Ptr { buf, .. }) =
            args.iter().find(|a| matches!(a, Arg::Ptr { buf, .. } if buf.0 >= self.buffers.len()))
        {
            return Err(DeviceError::OutOfBounds(format!("argument names no buffer {}", buf.0)));
        }
        let mut slots: Vec<Vec<u8>> =
            args.iter().map(|a| a.pack(|b| self.buffers.get(b.0).map_or(0, |&(p, _)| p))).collect();
        let mut params: Vec<*mut c_void> = slots.iter_mut().map(|s| s.as_mut_ptr() as *mut c_void).collect();
        self.bind()?;
        let cu = self.stream.cu_stream();
        self.start.record(&self.stream).map_err(drv("cuEventRecord"))?;
        let (g, b) = (k.grid, k.block);
        // SAFETY: one pointer per parameter, each to its packed value (alive
        // until the launch returns: the driver copies parameters at launch);
        // every pointer value names a live allocation of this context.
        unsafe { result::launch_kernel(k.function, (g[0], g[1], g[2]), (b[0], b[1], b[2]), k.shared, cu, &mut params) }
            .map_err(|e| DeviceError::Launch { kernel: k.name.clone(), why: e.to_string() })?;
        self.end.record(&self.stream).map_err(drv("cuEventRecord"))?;
        let ms = self
            .start
            .elapsed_ms(&self.end)
            .map_err(|e| DeviceError::Launch { kernel: k.name.clone(), why: e.to_string() })?;
        Ok(f64::from(ms))
    }

    fn census(&mut self) -> Result<Option<Vec<super::device::Ran>>, DeviceError> {
        #[cfg(feature = "cupti")]
        if let Some(c) = &self.census {
            self.stream.synchronize().map_err(drv("cuStreamSynchronize"))?;
            return c.take().map(Some);
        }
        Ok(None)
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        if self.bind().is_err() {
            return;
        }
        let _ = self.stream.synchronize();
        for k in self.kernels.drain(..) {
            // SAFETY: loaded once by `load`, unloaded once here.
            let _ = unsafe { result::module::unload(k.module) };
        }
        for (p, _) in self.buffers.drain(..).chain(std::iter::once(self.flush)) {
            // SAFETY: allocated once with cuMemAlloc, freed once here, the stream idle.
            let _ = unsafe { result::free_sync(p) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without the driver library, opening answers `NoDriver` (the gate's
    /// `needs-gpu`) instead of cudarc's panic.
    #[test]
    fn no_driver_library_is_an_answer_not_a_panic() {
        if driver_present() {
            eprintln!("skipped: this machine has a CUDA driver library");
            return;
        }
        let e = CudaDevice::open(0).err().expect("no device without a driver");
        assert!(matches!(e, DeviceError::NoDriver), "{e:?}");
        assert_eq!(e.to_string(), "no CUDA driver library (libcuda.so) on this machine");
    }
}
