//! The kernel census on a GPU (feature `cupti`): CUPTI's concurrent-kernel
//! activity records, flushed after each call, give the name of every kernel
//! that ran on any stream of the process since the last ask, and its start
//! and end on the device's own timestamp clock (the gate's second clock,
//! beside the events). The record's prefix through `name` is the same in
//! every `CUpti_ActivityKernel` version, so this reads it as version 4.
//!
//! CUPTI delivers records through two C callbacks with no user data: the
//! names go to a process-wide list, which is why one census is active at a
//! time.

use std::alloc::{Layout, alloc, dealloc};
use std::ffi::CStr;
use std::sync::Mutex;

use cudarc::cupti::result::activity;
use cudarc::cupti::sys;
use cudarc::driver::sys::CUcontext;

use super::device::{DeviceError, Ran};

const BUFFER_BYTES: usize = 8 << 20;
const BUFFER_ALIGN: usize = 8;

static RAN: Mutex<Vec<Ran>> = Mutex::new(Vec::new());

fn layout() -> Option<Layout> {
    Layout::from_size_align(BUFFER_BYTES, BUFFER_ALIGN).ok()
}

unsafe extern "C" fn requested(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize) {
    let ptr = match layout() {
        // SAFETY: a non-zero layout; freed in `completed`, which CUPTI calls for every buffer.
        Some(l) => unsafe { alloc(l) },
        None => std::ptr::null_mut(),
    };
    // SAFETY: CUPTI passes valid out-pointers.
    unsafe {
        *buffer = ptr;
        *size = if ptr.is_null() { 0 } else { BUFFER_BYTES };
        *max_records = 0;
    }
}

unsafe extern "C" fn completed(_ctx: CUcontext, _stream: u32, buffer: *mut u8, _size: usize, valid: usize) {
    if buffer.is_null() {
        return;
    }
    let mut names = Vec::new();
    let mut record: *mut sys::CUpti_Activity = std::ptr::null_mut();
    // SAFETY: `buffer` holds `valid` bytes of records CUPTI wrote.
    while unsafe { activity::get_next_record(buffer, valid, &mut record) }.is_ok() && !record.is_null() {
        // SAFETY: every record starts with its kind.
        let kind = unsafe { std::ptr::addr_of!((*record).kind).read_unaligned() };
        if kind != sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL {
            continue;
        }
        let k = record as *const sys::CUpti_ActivityKernel4;
        // SAFETY: a kernel record; its prefix through `name` is version 4's.
        let name = unsafe { std::ptr::addr_of!((*k).name).read_unaligned() };
        // SAFETY: as above; start and end lie before `name` in every version.
        let (start, end) =
            unsafe { (std::ptr::addr_of!((*k).start).read_unaligned(), std::ptr::addr_of!((*k).end).read_unaligned()) };
        let name = if name.is_null() {
            "<unnamed>".to_string()
        } else {
            // SAFETY: CUPTI's NUL-terminated name, alive while the buffer is.
            unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned()
        };
        names.push(Ran { name, ns: (end > start).then(|| end - start) });
    }
    RAN.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend(names);
    if let Some(l) = layout() {
        // SAFETY: allocated in `requested` with this layout.
        unsafe { dealloc(buffer, l) };
    }
}

fn err(call: &str) -> impl Fn(cudarc::cupti::result::CuptiError) -> DeviceError + '_ {
    move |e| DeviceError::Driver { call: call.to_string(), error: format!("{e:?}") }
}

/// Kernel activity records, on while this lives.
pub struct Census;

impl Census {
    /// Starts recording, or says why it cannot (no CUPTI library, CUPTI refusing).
    pub fn start() -> Result<Census, DeviceError> {
        // SAFETY: only tries to dlopen the library's candidate names.
        if !unsafe { sys::is_culib_present() } {
            return Err(DeviceError::Driver {
                call: "dlopen".into(),
                error: "no CUPTI library (libcupti.so.13)".into(),
            });
        }
        activity::register_callbacks(Some(requested), Some(completed))
            .map_err(err("cuptiActivityRegisterCallbacks"))?;
        activity::enable(sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
            .map_err(err("cuptiActivityEnable(CONCURRENT_KERNEL)"))?;
        Ok(Census)
    }

    /// The kernels that completed since the last call (the caller has synchronised).
    pub fn take(&self) -> Result<Vec<Ran>, DeviceError> {
        activity::flush_all(sys::CUpti_ActivityFlag::CUPTI_ACTIVITY_FLAG_FLUSH_FORCED as u32)
            .map_err(err("cuptiActivityFlushAll"))?;
        Ok(std::mem::take(&mut *RAN.lock().unwrap_or_else(std::sync::PoisonError::into_inner)))
    }
}

impl Drop for Census {
    fn drop(&mut self) {
        let _ = activity::disable(sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    }
}
