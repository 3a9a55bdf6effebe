//! A [`Device`] on the host, for testing the gate without a GPU: buffers
//! are byte vectors, and a "kernel" is a Rust closure registered for a cubin's
//! bytes, which gets the launch's arguments and the device's memory, as a
//! cubin would. A closure may keep state between calls (a `__device__`
//! global), write anywhere in any buffer (a stray store), launch a further
//! kernel (dynamic parallelism) and say how long it took.

use super::device::{Arg, BufferId, Device, DeviceError, KernelId, Ran};
use super::spec::LaunchSpec;

/// A kernel on the CPU device.
pub type CpuKernel = Box<dyn FnMut(&mut Launch<'_>) -> Result<(), DeviceError>>;

/// What a [`CpuKernel`] sees of one launch.
pub struct Launch<'a> {
    /// The arguments, in the spec's order.
    pub args: &'a [Arg],
    /// The grid it was launched with.
    pub grid: [u32; 3],
    mem: &'a mut [Vec<u8>],
    cost_us: f64,
    census_us: Option<f64>,
    extra: Vec<String>,
}

impl Launch<'_> {
    /// The pointer argument `i`: its buffer and byte offset.
    pub fn ptr(&self, i: usize) -> Result<(BufferId, usize), DeviceError> {
        match self.args.get(i) {
            Some(Arg::Ptr { buf, offset }) => Ok((*buf, *offset)),
            other => Err(DeviceError::Launch {
                kernel: "cpu".into(),
                why: format!("argument {i} is {other:?}, not a pointer"),
            }),
        }
    }

    /// `len` bytes at `delta` bytes from pointer argument `i` (`delta` may be negative).
    pub fn read(&self, i: usize, delta: i64, len: usize) -> Result<Vec<u8>, DeviceError> {
        let (buf, at) = self.ptr(i)?;
        let b = self.mem.get(buf.0).ok_or_else(|| oob(buf, delta))?;
        let s = span(at, delta, len, b.len()).ok_or_else(|| oob(buf, delta))?;
        Ok(b[s.0..s.1].to_vec())
    }

    /// Writes `bytes` at `delta` bytes from pointer argument `i`.
    pub fn write(&mut self, i: usize, delta: i64, bytes: &[u8]) -> Result<(), DeviceError> {
        let (buf, at) = self.ptr(i)?;
        let b = self.mem.get_mut(buf.0).ok_or_else(|| oob(buf, delta))?;
        let s = span(at, delta, bytes.len(), b.len()).ok_or_else(|| oob(buf, delta))?;
        b[s.0..s.1].copy_from_slice(bytes);
        Ok(())
    }

    /// `n` f32 elements from element `first` of pointer argument `i`.
    pub fn read_f32(&self, i: usize, first: usize, n: usize) -> Result<Vec<f32>, DeviceError> {
        let b = self.read(i, (first * 4) as i64, n * 4)?;
        Ok(b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }

    /// Writes f32 elements from element `first` of pointer argument `i`.
    pub fn write_f32(&mut self, i: usize, first: usize, vals: &[f32]) -> Result<(), DeviceError> {
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.write(i, (first * 4) as i64, &bytes)
    }

    /// `n` i32 elements from element `first` of pointer argument `i`.
    pub fn read_i32(&self, i: usize, first: usize, n: usize) -> Result<Vec<i32>, DeviceError> {
        let b = self.read(i, (first * 4) as i64, n * 4)?;
        Ok(b.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }

    /// How long this launch takes, microseconds (before the device's jitter).
    pub fn cost_us(&mut self, us: f64) {
        self.cost_us = us;
    }

    /// The duration the census's clock records, where it differs from the
    /// events' (a planted mismatch between the two clocks).
    pub fn census_us(&mut self, us: f64) {
        self.census_us = Some(us);
    }

    /// Another kernel this one started (dynamic parallelism): the census sees it.
    pub fn launch_child(&mut self, name: &str) {
        self.extra.push(name.to_string());
    }
}

fn span(at: usize, delta: i64, len: usize, size: usize) -> Option<(usize, usize)> {
    let start = i64::try_from(at).ok()?.checked_add(delta)?;
    let start = usize::try_from(start).ok()?;
    let end = start.checked_add(len)?;
    (end <= size).then_some((start, end))
}

fn oob(buf: BufferId, delta: i64) -> DeviceError {
    DeviceError::OutOfBounds(format!("illegal address: buffer {} at {delta:+} bytes from the argument", buf.0))
}

/// One operation the device did, in order (for tests of the gate's own sequence).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// An upload to a buffer.
    Upload(BufferId),
    /// A fill of a buffer.
    Fill(BufferId),
    /// An L2 flush.
    Flush,
    /// A timed launch of a kernel.
    Launch(String),
}

struct Loaded {
    name: String,
    closure: usize,
    grid: [u32; 3],
}

/// The host device. Register a closure per cubin with [`CpuDevice::kernel`].
pub struct CpuDevice {
    mem: Vec<Vec<u8>>,
    closures: Vec<(Vec<u8>, CpuKernel)>,
    loaded: Vec<Loaded>,
    ran: Vec<Ran>,
    jitter: f64,
    rng: u64,
    /// Everything the device did, in order.
    pub log: Vec<Op>,
}

impl CpuDevice {
    /// A device whose launch times vary by up to `jitter` (relative, e.g. 0.02), from `seed`.
    pub fn new(jitter: f64, seed: u64) -> CpuDevice {
        CpuDevice {
            mem: Vec::new(),
            closures: Vec::new(),
            loaded: Vec::new(),
            ran: Vec::new(),
            jitter,
            rng: seed,
            log: Vec::new(),
        }
    }

    /// Registers the closure that runs when a spec with cubin bytes `cubin` is launched.
    pub fn kernel(&mut self, cubin: &[u8], k: CpuKernel) {
        self.closures.push((cubin.to_vec(), k));
    }

    fn uniform(&mut self) -> f64 {
        // splitmix64
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }

    fn buffer(&mut self, buf: BufferId) -> Result<&mut Vec<u8>, DeviceError> {
        self.mem.get_mut(buf.0).ok_or_else(|| DeviceError::OutOfBounds(format!("no buffer {}", buf.0)))
    }
}

impl Device for CpuDevice {
    fn describe(&self) -> String {
        "cpu (test device: kernels are Rust closures)".into()
    }

    fn l2_bytes(&self) -> usize {
        1 << 10
    }

    fn alloc(&mut self, bytes: usize) -> Result<BufferId, DeviceError> {
        self.mem.push(vec![0xCD; bytes]);
        Ok(BufferId(self.mem.len() - 1))
    }

    fn upload(&mut self, buf: BufferId, offset: usize, bytes: &[u8]) -> Result<(), DeviceError> {
        self.log.push(Op::Upload(buf));
        let b = self.buffer(buf)?;
        let s = span(offset, 0, bytes.len(), b.len()).ok_or_else(|| oob(buf, offset as i64))?;
        b[s.0..s.1].copy_from_slice(bytes);
        Ok(())
    }

    fn download(&mut self, buf: BufferId, offset: usize, out: &mut [u8]) -> Result<(), DeviceError> {
        let b = self.buffer(buf)?;
        let s = span(offset, 0, out.len(), b.len()).ok_or_else(|| oob(buf, offset as i64))?;
        out.copy_from_slice(&b[s.0..s.1]);
        Ok(())
    }

    fn fill(&mut self, buf: BufferId, offset: usize, words: usize, word: u32) -> Result<(), DeviceError> {
        self.log.push(Op::Fill(buf));
        let b = self.buffer(buf)?;
        let s = span(offset, 0, words * 4, b.len()).ok_or_else(|| oob(buf, offset as i64))?;
        for c in b[s.0..s.1].chunks_exact_mut(4) {
            c.copy_from_slice(&word.to_le_bytes());
        }
        Ok(())
    }

    fn flush_l2(&mut self) -> Result<(), DeviceError> {
        self.log.push(Op::Flush);
        Ok(())
    }

    fn load(&mut self, spec: &LaunchSpec, cubin: &[u8]) -> Result<KernelId, DeviceError> {
        let closure = self
            .closures
            .iter()
            .position(|(c, _)| c == cubin)
            .ok_or_else(|| DeviceError::NoKernel(spec.kernel.clone()))?;
        self.loaded.push(Loaded { name: spec.kernel.clone(), closure, grid: spec.grid });
        Ok(KernelId(self.loaded.len() - 1))
    }

    fn timed_launch(&mut self, kernel: KernelId, args: &[Arg]) -> Result<f64, DeviceError> {
        let (name, closure, grid) = match self.loaded.get(kernel.0) {
            Some(l) => (l.name.clone(), l.closure, l.grid),
            None => return Err(DeviceError::NoKernel(format!("#{}", kernel.0))),
        };
        self.log.push(Op::Launch(name.clone()));
        let mut launch = Launch { args, grid, mem: &mut self.mem, cost_us: 1.0, census_us: None, extra: Vec::new() };
        let Some((_, k)) = self.closures.get_mut(closure) else { return Err(DeviceError::NoKernel(name)) };
        k(&mut launch)?;
        let (cost, census_us, extra) = (launch.cost_us, launch.census_us, launch.extra);
        let u = self.uniform();
        let us = cost * (1.0 + self.jitter * (2.0 * u - 1.0));
        // the census's clock reads the same launch as the events, unless a kernel says otherwise
        self.ran.push(Ran { name, ns: Some((census_us.unwrap_or(us) * 1000.0).round() as u64) });
        self.ran.extend(extra.into_iter().map(|name| Ran { name, ns: Some(1000) }));
        Ok(us / 1000.0)
    }

    fn census(&mut self) -> Result<Option<Vec<Ran>>, DeviceError> {
        Ok(Some(std::mem::take(&mut self.ran)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_writing_outside_its_buffer_faults_instead_of_writing() {
        let mut d = CpuDevice::new(0.0, 1);
        let b = d.alloc(16).unwrap();
        let args = [Arg::Ptr { buf: b, offset: 8 }];
        let mut l =
            Launch { args: &args, grid: [1, 1, 1], mem: &mut d.mem, cost_us: 0.0, census_us: None, extra: Vec::new() };
        assert!(l.write(0, 4, &[1, 2, 3, 4]).is_ok());
        assert!(matches!(l.write(0, 8, &[1]), Err(DeviceError::OutOfBounds(_))));
        assert!(matches!(l.read(0, -9, 1), Err(DeviceError::OutOfBounds(_))));
        assert_eq!(l.read(0, -8, 2).unwrap(), vec![0xCD, 0xCD]);
    }
}
