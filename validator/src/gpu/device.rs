//! What the GPU gate needs from a device, as a trait: buffers, copies,
//! fills, an L2 flush, a loaded kernel launched on the gate's own stream
//! (timed with events around the launch alone), and a census of the kernels
//! that ran. [`super::cuda::CudaDevice`] implements it with cudarc on a GPU,
//! [`super::cpu::CpuDevice`] on the host for tests, where a Rust closure
//! plays the cubin's part.

use super::spec::LaunchSpec;

/// A device could not do what the gate asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// No CUDA driver library: the gate answers `needs-gpu`, never a panic.
    #[error("no CUDA driver library (libcuda.so) on this machine")]
    NoDriver,
    /// The driver is there but the device cannot be used (no device, a bad ordinal).
    #[error("no usable CUDA device: {0}")]
    NoDevice(String),
    /// A driver call failed: the call and the CUDA error.
    #[error("{call}: {error}")]
    Driver {
        /// What was asked.
        call: String,
        /// The driver's answer.
        error: String,
    },
    /// An access outside a buffer (on a GPU, an illegal address).
    #[error("{0}")]
    OutOfBounds(String),
    /// No kernel of that name in the module (or, on the CPU device, no closure for the cubin).
    #[error("kernel `{0}` not found in its module")]
    NoKernel(String),
    /// The launch itself failed.
    #[error("launch of `{kernel}` failed: {why}")]
    Launch {
        /// The kernel.
        kernel: String,
        /// Why.
        why: String,
    },
}

/// A device buffer, by the device's own numbering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BufferId(pub usize);

/// A loaded kernel, by the device's own numbering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KernelId(pub usize);

/// One kernel argument, already resolved: what the launch passes in the
/// parameter's slot.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arg {
    /// A pointer `offset` bytes into a buffer.
    Ptr {
        /// The buffer.
        buf: BufferId,
        /// Bytes from its start.
        offset: usize,
    },
    /// A null pointer (an unused scratch slot).
    Null,
    /// A 32-bit integer.
    I32(i32),
    /// A 64-bit integer.
    I64(i64),
    /// A 32-bit float (Triton narrows the spec's value to f32).
    F32(f32),
}

impl Arg {
    /// The bytes the kernel reads for this parameter (little-endian), with
    /// the pointer a device gives the buffer.
    pub fn pack(&self, base: impl Fn(BufferId) -> u64) -> Vec<u8> {
        match *self {
            Arg::Ptr { buf, offset } => (base(buf) + offset as u64).to_le_bytes().to_vec(),
            Arg::Null => 0u64.to_le_bytes().to_vec(),
            Arg::I32(v) => v.to_le_bytes().to_vec(),
            Arg::I64(v) => v.to_le_bytes().to_vec(),
            Arg::F32(v) => v.to_le_bytes().to_vec(),
        }
    }
}

/// What the gate needs from a GPU. Every operation is ordered on one stream
/// the gate owns; `download` and `timed_launch` wait for it.
pub trait Device {
    /// The device, in words, for the evidence.
    fn describe(&self) -> String;
    /// The L2 size in bytes (the flush covers twice this).
    fn l2_bytes(&self) -> usize;
    /// Allocates `bytes` (256-byte aligned, contents unspecified).
    fn alloc(&mut self, bytes: usize) -> Result<BufferId, DeviceError>;
    /// Copies `bytes` into `buf` at `offset`.
    fn upload(&mut self, buf: BufferId, offset: usize, bytes: &[u8]) -> Result<(), DeviceError>;
    /// Copies `out.len()` bytes of `buf` from `offset` into `out`, after everything queued.
    fn download(&mut self, buf: BufferId, offset: usize, out: &mut [u8]) -> Result<(), DeviceError>;
    /// Writes the 32-bit `word` (little-endian) `words` times from `offset` (a multiple of 4).
    fn fill(&mut self, buf: BufferId, offset: usize, words: usize, word: u32) -> Result<(), DeviceError>;
    /// Evicts the L2 cache (a memset of a buffer twice its size).
    fn flush_l2(&mut self) -> Result<(), DeviceError>;
    /// Loads the kernel `spec.kernel` from `cubin`, ready to launch with `spec`'s geometry.
    fn load(&mut self, spec: &LaunchSpec, cubin: &[u8]) -> Result<KernelId, DeviceError>;
    /// Launches a loaded kernel with `args` and waits for it; returns the
    /// milliseconds between events recorded just before and after the launch.
    fn timed_launch(&mut self, kernel: KernelId, args: &[Arg]) -> Result<f64, DeviceError>;
    /// The kernels that ran since the last ask, or `None` when this device
    /// cannot observe them (a GPU without CUPTI).
    fn census(&mut self) -> Result<Option<Vec<Ran>>, DeviceError>;
}

/// A kernel the census saw run.
#[derive(Debug, Clone, PartialEq)]
pub struct Ran {
    /// Its name.
    pub name: String,
    /// Its duration on the device by the census's own clock (CUPTI's record:
    /// end - start), where the record has one: the gate's second clock.
    pub ns: Option<u64>,
}
