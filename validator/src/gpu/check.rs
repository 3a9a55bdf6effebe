//! A launch spec checked against its cubin, without a GPU: the spec is the
//! candidate's word (its sandboxed worker wrote it), the cubin's ELF is what
//! the driver will run, and nothing is launched that the two do not agree
//! on. [`check`] returns the [`CheckedLaunch`] the gate launches, or the one
//! [`Refusal`] that stops it; [`pack`] lays the arguments out as the
//! kernel reads them (the buffer `cuLaunchKernel`'s `kernelParams` point
//! into).
//!
//! Refused, each with a one-line reason:
//! - a spec of another format, or a cubin whose sha256 is not the spec's;
//! - a cubin that is not a CUDA ELF, whose only GLOBAL FUNC is not the
//!   spec's kernel, or with no `.nv.info.<kernel>`;
//! - parameters whose count, sizes (pointer 8, i32 4, i64 8, f32 4) or
//!   offsets (each at the next multiple of its size, as C lays them out)
//!   disagree with `EIATTR_KPARAM_INFO`, or a parameter bank whose size is
//!   not `EIATTR_CBANK_PARAM_SIZE`;
//! - a block that is not `EIATTR_REQNTID` (when the cubin has one), exceeds
//!   `EIATTR_MAXNTID` or 1024 threads; a grid beyond the launch limits;
//!   dynamic shared memory above [`MAX_SHARED_BYTES`];
//! - a value that breaks what the spec says the cubin assumes: an int not a
//!   multiple of 16 where `divisible_by_16`, an int outside its width, a
//!   float that is not a finite f32, a pointer alignment that is not a
//!   power of two up to 256 (the pointers themselves are checked by
//!   [`pack`]);
//! - what this version does not launch: `num_ctas != 1`, cooperative
//!   launches, PDL, tensor descriptors, profile scratch, global scratch with
//!   no global scratch pointer to pass it in;
//! - undefined symbols other than the reserved shared memory
//!   (`.nv.reservedSmem.*`) and ptxas's unnamed local placeholder (a device
//!   runtime launch, another module's code), and device globals
//!   (`.nv.global`: memory that outlives a call).

use super::elf::{Cubin, ElfError, KParam};
use super::sha256::sha256_hex;
use super::spec::{FORMAT, LaunchSpec, Param, ScratchKind};

/// The most dynamic shared memory a block may opt into on sm_90 (H100,
/// H200): 227 KiB.
pub const MAX_SHARED_BYTES: u32 = 227 * 1024;

/// Why a spec is not launched.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// A spec format this version does not read.
    #[error("launch spec format {0}, this kidiom reads format {FORMAT}")]
    Format(u32),
    /// The cubin is not the one the spec names.
    #[error("cubin sha256 {actual} is not the spec's {spec}")]
    Sha256 {
        /// The spec's `cubin_sha256`.
        spec: String,
        /// The cubin's.
        actual: String,
    },
    /// The cubin's ELF cannot be read.
    #[error("cubin: {0}")]
    Elf(#[from] ElfError),
    /// The spec's kernel is not the cubin's one entry.
    #[error("entry {kernel} is not the cubin's one GLOBAL FUNC (it has: {})", if .entries.is_empty() { "none".to_owned() } else { .entries.join(", ") })]
    Entry {
        /// The spec's kernel.
        kernel: String,
        /// The cubin's GLOBAL FUNC symbols.
        entries: Vec<String>,
    },
    /// No `.nv.info.<kernel>`, or no `EIATTR_CBANK_PARAM_SIZE` in it.
    #[error("cubin has no {0}: its parameter layout is unknown")]
    NoParamInfo(String),
    /// The parameter counts differ.
    #[error("spec has {spec} parameters, the cubin's EIATTR_KPARAM_INFO {cubin}")]
    ParamCount {
        /// The spec's.
        spec: usize,
        /// The cubin's.
        cubin: usize,
    },
    /// The cubin's ordinals are not 0, 1, ... in order.
    #[error("the cubin's EIATTR_KPARAM_INFO ordinals are not 0..{0}")]
    Ordinals(usize),
    /// A parameter's size differs.
    #[error("parameter {index} ({name}) is {spec} bytes in the spec, {cubin} in the cubin")]
    ParamSize {
        /// Its position.
        index: usize,
        /// Its name.
        name: String,
        /// Bytes by the spec's type.
        spec: u16,
        /// Bytes by EIATTR_KPARAM_INFO.
        cubin: u16,
    },
    /// A parameter's offset differs.
    #[error("parameter {index} ({name}) is at offset {spec:#x} by the spec's types, {cubin:#x} in the cubin")]
    ParamOffset {
        /// Its position.
        index: usize,
        /// Its name.
        name: String,
        /// Its offset laid out as C does from the spec's sizes.
        spec: u16,
        /// Its offset by EIATTR_KPARAM_INFO.
        cubin: u16,
    },
    /// The parameter bank's size differs.
    #[error("the parameters take {spec:#x} bytes by the spec, EIATTR_CBANK_PARAM_SIZE is {cubin:#x}")]
    CbankSize {
        /// The end of the spec's last parameter.
        spec: u16,
        /// The cubin's.
        cubin: u16,
    },
    /// The block is not the one the cubin requires.
    #[error("block {block:?} is not the cubin's EIATTR_REQNTID {reqntid:?}")]
    Reqntid {
        /// The spec's block.
        block: [u32; 3],
        /// The cubin's.
        reqntid: [u32; 3],
    },
    /// The block exceeds the cubin's maximum.
    #[error("block {block:?} exceeds the cubin's EIATTR_MAXNTID {maxntid:?}")]
    Maxntid {
        /// The spec's block.
        block: [u32; 3],
        /// The cubin's.
        maxntid: [u32; 3],
    },
    /// A block no device launches.
    #[error("block {0:?}: every dimension at least 1 and at most 1024 threads (z at most 64)")]
    Block([u32; 3]),
    /// A grid no device launches.
    #[error("grid {0:?}: every dimension at least 1, x below 2^31, y and z at most 65535")]
    Grid([u32; 3]),
    /// Too much dynamic shared memory.
    #[error("{0} bytes of dynamic shared memory, above sm_90's {MAX_SHARED_BYTES}")]
    Shared(u32),
    /// An integer of a width the ABI does not have.
    #[error("int parameter {name} of {bits} bits (32 or 64)")]
    IntWidth {
        /// Its name.
        name: String,
        /// Its width.
        bits: u32,
    },
    /// An integer that does not fit its width.
    #[error("int parameter {name} = {value} does not fit in {bits} bits")]
    IntRange {
        /// Its name.
        name: String,
        /// Its value.
        value: i64,
        /// Its width.
        bits: u32,
    },
    /// An integer that breaks the cubin's divisibility assumption.
    #[error("int parameter {name} = {value} is not a multiple of 16, which the cubin assumes")]
    NotDivisible {
        /// Its name.
        name: String,
        /// Its value.
        value: i64,
    },
    /// A float that is not a finite f32.
    #[error("float parameter {name} = {value} is not a finite f32")]
    Float {
        /// Its name.
        name: String,
        /// Its value.
        value: f64,
    },
    /// A pointer alignment the gate cannot honour.
    #[error("tensor {name}: alignment {align} is not a power of two from 1 to 256")]
    Align {
        /// The tensor.
        name: String,
        /// The spec's alignment.
        align: u32,
    },
    /// A launch feature this version does not support.
    #[error("unsupported by the device gate: {0}")]
    Unsupported(String),
    /// Symbols only a link the gate never makes resolves.
    #[error("undefined symbols: {}", .0.join(", "))]
    Undefined(Vec<String>),
    /// Device memory that outlives a launch.
    #[error("device globals ({}): memory that outlives a call", .0.join(", "))]
    DeviceGlobals(Vec<String>),
}

/// Where one parameter goes in the packed buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Byte offset (EIATTR_KPARAM_INFO).
    pub offset: usize,
    /// Bytes.
    pub size: usize,
}

/// A spec the cubin agrees with: what the gate launches.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedLaunch {
    /// The spec, as read.
    pub spec: LaunchSpec,
    /// One slot per `spec.params`, in order.
    pub slots: Vec<Slot>,
    /// Bytes of the packed parameters (EIATTR_CBANK_PARAM_SIZE).
    pub param_bytes: usize,
    /// The cubin's EIATTR_REQNTID, when it has one.
    pub reqntid: Option<[u32; 3]>,
    /// The cubin's EIATTR_MAXNTID, when it has one.
    pub maxntid: Option<[u32; 3]>,
}

/// A parameter's size by the spec's type: 0 for an int width the ABI lacks
/// (refused by the value checks).
fn spec_size(p: &Param) -> u16 {
    match p {
        Param::Tensor { .. } | Param::Scratch { .. } => 8,
        Param::Int { bits: 32, .. } | Param::Float { .. } => 4,
        Param::Int { bits: 64, .. } => 8,
        Param::Int { .. } => 0,
    }
}

/// A parameter's name, for messages.
pub fn param_name(p: &Param) -> String {
    match p {
        Param::Tensor { name, .. } | Param::Int { name, .. } | Param::Float { name, .. } => name.clone(),
        Param::Scratch { which: ScratchKind::Global } => "global scratch".into(),
        Param::Scratch { which: ScratchKind::Profile } => "profile scratch".into(),
    }
}

/// Checks `spec` against `cubin` (the bytes of its `kernel.cubin`).
pub fn check(spec: &LaunchSpec, cubin: &[u8]) -> Result<CheckedLaunch, Refusal> {
    if spec.format != FORMAT {
        return Err(Refusal::Format(spec.format));
    }
    let actual = sha256_hex(cubin);
    if !actual.eq_ignore_ascii_case(&spec.cubin_sha256) {
        return Err(Refusal::Sha256 { spec: spec.cubin_sha256.clone(), actual });
    }
    let elf = Cubin::parse(cubin)?;
    let entries = elf.entries();
    if entries != [spec.kernel.as_str()] {
        return Err(Refusal::Entry {
            kernel: spec.kernel.clone(),
            entries: entries.iter().map(|e| e.to_string()).collect(),
        });
    }
    let undefined = elf.foreign_undefined();
    if !undefined.is_empty() {
        return Err(Refusal::Undefined(
            undefined.iter().map(|s| if s.name.is_empty() { "(unnamed)".into() } else { s.name.clone() }).collect(),
        ));
    }
    let globals = elf.global_sections();
    if !globals.is_empty() {
        return Err(Refusal::DeviceGlobals(globals.iter().map(|g| g.to_string()).collect()));
    }
    unsupported(spec)?;
    geometry(spec)?;
    values(spec)?;
    let info_name = format!(".nv.info.{}", spec.kernel);
    let info = elf.kernels.get(&spec.kernel).ok_or_else(|| Refusal::NoParamInfo(info_name.clone()))?;
    let slots = layout(spec, &info.params)?;
    let end = spec.params.iter().zip(&slots).map(|(p, s)| s.offset as u16 + spec_size(p)).max().unwrap_or(0);
    let cbank =
        info.cbank_param_size.ok_or_else(|| Refusal::NoParamInfo(format!("EIATTR_CBANK_PARAM_SIZE in {info_name}")))?;
    if cbank != end {
        return Err(Refusal::CbankSize { spec: end, cubin: cbank });
    }
    if let Some(reqntid) = info.reqntid
        && reqntid != spec.block
    {
        return Err(Refusal::Reqntid { block: spec.block, reqntid });
    }
    if let Some(maxntid) = info.maxntid {
        let threads = |d: [u32; 3]| d.iter().map(|&x| u64::from(x)).product::<u64>();
        if spec.block.iter().zip(maxntid).any(|(b, m)| *b > m) || threads(spec.block) > threads(maxntid) {
            return Err(Refusal::Maxntid { block: spec.block, maxntid });
        }
    }
    Ok(CheckedLaunch {
        spec: spec.clone(),
        slots,
        param_bytes: usize::from(cbank),
        reqntid: info.reqntid,
        maxntid: info.maxntid,
    })
}

fn unsupported(spec: &LaunchSpec) -> Result<(), Refusal> {
    let why = if spec.num_ctas != 1 {
        format!("num_ctas = {} (clusters)", spec.num_ctas)
    } else if spec.cooperative {
        "a cooperative launch".into()
    } else if spec.pdl {
        "programmatic dependent launch (PDL)".into()
    } else if spec.tensor_descriptors > 0 {
        format!("{} host-side tensor descriptors (TMA)", spec.tensor_descriptors)
    } else if spec.profile_scratch_bytes > 0 {
        format!("{} bytes of profile scratch (Proton instrumentation)", spec.profile_scratch_bytes)
    } else if !spec.global_scratch_align.is_power_of_two() || spec.global_scratch_align > 256 {
        format!("global scratch alignment {}", spec.global_scratch_align)
    } else {
        let scratch = |k: ScratchKind| {
            spec.params.iter().filter(|p| matches!(p, Param::Scratch { which } if *which == k)).count()
        };
        if scratch(ScratchKind::Global) > 1 || scratch(ScratchKind::Profile) > 1 {
            "more than one scratch pointer of a kind".into()
        } else if spec.global_scratch_bytes > 0 && scratch(ScratchKind::Global) == 0 {
            format!(
                "{} bytes of global scratch and no global scratch parameter to pass it in",
                spec.global_scratch_bytes
            )
        } else {
            return Ok(());
        }
    };
    Err(Refusal::Unsupported(why))
}

fn geometry(spec: &LaunchSpec) -> Result<(), Refusal> {
    let [bx, by, bz] = spec.block;
    if bx == 0 || by == 0 || bz == 0 || bz > 64 || u64::from(bx) * u64::from(by) * u64::from(bz) > 1024 {
        return Err(Refusal::Block(spec.block));
    }
    let [gx, gy, gz] = spec.grid;
    if gx == 0 || gy == 0 || gz == 0 || gx > i32::MAX as u32 || gy > 65535 || gz > 65535 {
        return Err(Refusal::Grid(spec.grid));
    }
    if spec.shared_bytes > MAX_SHARED_BYTES {
        return Err(Refusal::Shared(spec.shared_bytes));
    }
    Ok(())
}

fn values(spec: &LaunchSpec) -> Result<(), Refusal> {
    for p in &spec.params {
        match p {
            Param::Int { name, value, bits, divisible_by_16 } => {
                if *bits != 32 && *bits != 64 {
                    return Err(Refusal::IntWidth { name: name.clone(), bits: *bits });
                }
                if *bits == 32 && i32::try_from(*value).is_err() {
                    return Err(Refusal::IntRange { name: name.clone(), value: *value, bits: *bits });
                }
                if *divisible_by_16 && value % 16 != 0 {
                    return Err(Refusal::NotDivisible { name: name.clone(), value: *value });
                }
            }
            Param::Float { name, value } => {
                if !(*value as f32).is_finite() {
                    return Err(Refusal::Float { name: name.clone(), value: *value });
                }
            }
            Param::Tensor { name, align, .. } => {
                if !align.is_power_of_two() || *align > 256 {
                    return Err(Refusal::Align { name: name.clone(), align: *align });
                }
            }
            Param::Scratch { .. } => {}
        }
    }
    Ok(())
}

/// The slots of the spec's parameters, each checked against the cubin's.
fn layout(spec: &LaunchSpec, cubin: &[KParam]) -> Result<Vec<Slot>, Refusal> {
    if spec.params.len() != cubin.len() {
        return Err(Refusal::ParamCount { spec: spec.params.len(), cubin: cubin.len() });
    }
    if cubin.iter().enumerate().any(|(i, k)| usize::from(k.ordinal) != i) {
        return Err(Refusal::Ordinals(cubin.len()));
    }
    let mut next = 0u16;
    let mut slots = Vec::with_capacity(cubin.len());
    for (index, (p, k)) in spec.params.iter().zip(cubin).enumerate() {
        let size = spec_size(p);
        if size != k.size {
            return Err(Refusal::ParamSize { index, name: param_name(p), spec: size, cubin: k.size });
        }
        let offset = next.div_ceil(size) * size;
        if offset != k.offset {
            return Err(Refusal::ParamOffset { index, name: param_name(p), spec: offset, cubin: k.offset });
        }
        next = offset + size;
        slots.push(Slot { offset: usize::from(offset), size: usize::from(size) });
    }
    Ok(slots)
}

/// Why arguments could not be packed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PackError {
    /// Not one address per pointer parameter.
    #[error("{expected} pointer parameters (tensors and scratch), {got} addresses given")]
    Count {
        /// Tensor and scratch parameters of the spec.
        expected: usize,
        /// Addresses given.
        got: usize,
    },
    /// A tensor's address breaks the alignment the cubin assumes.
    #[error("tensor {name} at {address:#x} is not {align}-byte aligned, which the cubin assumes")]
    Misaligned {
        /// The tensor.
        name: String,
        /// Its device address.
        address: u64,
        /// The spec's alignment.
        align: u32,
    },
    /// A tensor at address 0.
    #[error("tensor {0} at address 0")]
    Null(String),
}

impl CheckedLaunch {
    /// The number of pointer parameters (tensors and scratch) [`pack`] takes
    /// an address for.
    pub fn pointer_count(&self) -> usize {
        self.spec.params.iter().filter(|p| matches!(p, Param::Tensor { .. } | Param::Scratch { .. })).count()
    }
}

/// The kernel's parameters packed at their EIATTR_KPARAM_INFO offsets:
/// `pointers` holds one device address per `Param::Tensor` and
/// `Param::Scratch` of the spec, in the spec's order (0 for a scratch of 0
/// bytes); ints and floats come from the spec. `cuLaunchKernel`'s
/// `kernelParams[i]` is then `buffer + slots[i].offset`.
pub fn pack(launch: &CheckedLaunch, pointers: &[u64]) -> Result<Vec<u8>, PackError> {
    let expected = launch.pointer_count();
    if pointers.len() != expected {
        return Err(PackError::Count { expected, got: pointers.len() });
    }
    let mut buf = vec![0u8; launch.param_bytes];
    let mut next = pointers.iter();
    for (p, slot) in launch.spec.params.iter().zip(&launch.slots) {
        let bytes: Vec<u8> = match p {
            Param::Tensor { name, align, .. } => {
                let address = next.next().copied().unwrap_or(0);
                if address == 0 {
                    return Err(PackError::Null(name.clone()));
                }
                if address % u64::from(*align) != 0 {
                    return Err(PackError::Misaligned { name: name.clone(), address, align: *align });
                }
                address.to_le_bytes().to_vec()
            }
            Param::Scratch { .. } => next.next().copied().unwrap_or(0).to_le_bytes().to_vec(),
            // widths and ranges were checked by `check`
            Param::Int { value, bits: 32, .. } => (*value as i32).to_le_bytes().to_vec(),
            Param::Int { value, .. } => value.to_le_bytes().to_vec(),
            Param::Float { value, .. } => (*value as f32).to_le_bytes().to_vec(),
        };
        buf[slot.offset..slot.offset + slot.size].copy_from_slice(&bytes);
    }
    Ok(buf)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use super::super::elf::tests::{DECODE, elf, nv_info, symbols};
    use super::super::spec::TensorRole;
    use super::*;

    fn tensor(name: &str, role: TensorRole, align: u32) -> Param {
        Param::Tensor { name: name.into(), dtype: if name == "slots" { "i64" } else { "fp32" }.into(), role, align }
    }

    /// The decode kernel's spec at its bench shape, as the harness writes it.
    fn decode_spec() -> LaunchSpec {
        use TensorRole::*;
        let mut params: Vec<Param> = [
            ("q", Input),
            ("k", Input),
            ("v", Input),
            ("g", Input),
            ("beta", Input),
            ("state", InOut),
            ("slots", Input),
            ("o", Output),
        ]
        .iter()
        .map(|(n, r)| tensor(n, *r, 16))
        .collect();
        params.push(Param::Float { name: "scale".into(), value: 128f64.powf(-0.5) });
        params.push(Param::Scratch { which: ScratchKind::Global });
        params.push(Param::Scratch { which: ScratchKind::Profile });
        LaunchSpec {
            format: FORMAT,
            kernel: "kda_decode_kernel".into(),
            cubin: "kernel.cubin".into(),
            cubin_sha256: sha256_hex(DECODE),
            shape: BTreeMap::from([("N".into(), 64), ("H".into(), 16), ("HV".into(), 32)]),
            grid: [4, 2048, 1],
            block: [128, 1, 1],
            shared_bytes: 512,
            num_ctas: 1,
            cooperative: false,
            pdl: false,
            tensor_descriptors: 0,
            global_scratch_bytes: 0,
            global_scratch_align: 1,
            profile_scratch_bytes: 0,
            params,
            tools: BTreeMap::new(),
        }
    }

    /// The refusal of `spec` changed by `f` against the decode cubin.
    fn refused(f: impl FnOnce(&mut LaunchSpec)) -> Refusal {
        let mut spec = decode_spec();
        f(&mut spec);
        match check(&spec, DECODE) {
            Ok(_) => panic!("accepted: {spec:?}"),
            Err(r) => {
                assert!(!r.to_string().contains('\n'), "one line: {r}");
                r
            }
        }
    }

    #[test]
    fn the_decode_spec_checks_and_packs_at_the_cubins_offsets() {
        let launch = check(&decode_spec(), DECODE).expect("the decode spec agrees with its cubin");
        let offsets: Vec<usize> = launch.slots.iter().map(|s| s.offset).collect();
        assert_eq!(offsets, [0x00, 0x08, 0x10, 0x18, 0x20, 0x28, 0x30, 0x38, 0x40, 0x48, 0x50]);
        assert_eq!(launch.param_bytes, 0x58);
        assert_eq!(launch.reqntid, Some([128, 1, 1]));
        // 8 tensors and the two scratch pointers
        let pointers: Vec<u64> = (1..=8).map(|i| i << 20).chain([0, 0]).collect();
        let buf = pack(&launch, &pointers).expect("packs");
        assert_eq!(buf.len(), 0x58);
        for i in 0..8 {
            assert_eq!(buf[i * 8..i * 8 + 8], ((i as u64 + 1) << 20).to_le_bytes());
        }
        assert_eq!(buf[0x40..0x44], (128f32.powf(-0.5)).to_le_bytes());
        assert_eq!(buf[0x44..0x58], [0u8; 20]);
    }

    #[test]
    fn pack_refuses_addresses_the_cubin_cannot_take() {
        let launch = check(&decode_spec(), DECODE).expect("checks");
        let mut pointers: Vec<u64> = (1..=8).map(|i| i << 20).chain([0, 0]).collect();
        assert_eq!(pack(&launch, &pointers[..9]), Err(PackError::Count { expected: 10, got: 9 }));
        pointers[5] += 4; // the state pool 4 bytes off: Triton's 'D' assumption broken
        assert!(matches!(pack(&launch, &pointers), Err(PackError::Misaligned { ref name, .. }) if name == "state"));
        pointers[5] = 0;
        assert_eq!(pack(&launch, &pointers), Err(PackError::Null("state".into())));
    }

    #[test]
    fn packs_ints_of_both_widths() {
        // a CUDA-like kernel: (ptr, i32, i64, f32) at 0, 8, 0x10, 0x18; bank 0x1c
        let (strtab, symtab) = symbols(&[("k", 1, 2, 4)]);
        let info = nv_info(&[(0, 8), (8, 4), (0x10, 8), (0x18, 4)], Some(0x1c), None, None);
        let bytes = elf(&[(".strtab", 3, strtab), (".symtab", 2, symtab), (".nv.info.k", 0x7000_0000, info)]);
        let mut spec = decode_spec();
        spec.kernel = "k".into();
        spec.cubin_sha256 = sha256_hex(&bytes);
        spec.params = vec![
            tensor("x", TensorRole::Output, 4),
            Param::Int { name: "n".into(), value: -3, bits: 32, divisible_by_16: false },
            Param::Int { name: "m".into(), value: 1 << 40, bits: 64, divisible_by_16: true },
            Param::Float { name: "s".into(), value: 0.5 },
        ];
        let launch = check(&spec, &bytes).expect("checks");
        let buf = pack(&launch, &[0x1004]).expect("packs");
        assert_eq!(buf[0..8], 0x1004u64.to_le_bytes());
        assert_eq!(buf[8..12], (-3i32).to_le_bytes());
        assert_eq!(buf[12..16], [0; 4]);
        assert_eq!(buf[16..24], (1i64 << 40).to_le_bytes());
        assert_eq!(buf[24..28], 0.5f32.to_le_bytes());
    }

    #[test]
    fn the_spec_the_harness_wrote_checks_against_its_cubin() {
        let text = include_str!("../../tests/fixtures/gpu/kda_decode_bench.launch.json");
        let spec: LaunchSpec = serde_json::from_str(text).expect("the harness's launch.json is a LaunchSpec");
        assert_eq!(spec, decode_spec_with_shape(&spec));
        let launch = check(&spec, DECODE).expect("the emitted spec agrees with its cubin");
        assert_eq!(launch.slots.last(), Some(&Slot { offset: 0x50, size: 8 }));
    }

    /// [`decode_spec`] with the fixture's full shape and tools (the rest must be equal).
    fn decode_spec_with_shape(emitted: &LaunchSpec) -> LaunchSpec {
        let mut s = decode_spec();
        s.shape = emitted.shape.clone();
        s.tools = emitted.tools.clone();
        s
    }

    /// The harness's Python, or None with a printed reason (a failure under CI),
    /// as `tests/project.rs` does.
    pub(crate) fn python() -> Option<std::path::PathBuf> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let py = std::env::var_os("KIDIOM_PYTHON").map(Into::into).unwrap_or_else(|| root.join(".venv/bin/python"));
        let ok = std::process::Command::new(&py)
            .args(["-c", "import numpy, triton"])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if !ok {
            assert!(
                std::env::var_os("CI").is_none(),
                "no Python with numpy and triton at {} (CI must run this)",
                py.display()
            );
            eprintln!("skipping: no Python with numpy and triton at {} (run scripts/setup-python.sh)", py.display());
            return None;
        }
        Some(py)
    }

    /// The GPU machine's Triton (3.6, `.venv-triton36`, made by scripts/test.sh), or None
    /// with a printed reason (a failure under CI, which must run it).
    fn python_triton36() -> Option<std::path::PathBuf> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let py = std::env::var_os("KIDIOM_TRITON36_PYTHON")
            .map(Into::into)
            .unwrap_or_else(|| root.join(".venv-triton36/bin/python"));
        let version = std::process::Command::new(&py)
            .args(["-c", "import numpy, triton; print(triton.__version__)"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        match version {
            Some(v) if v.starts_with("3.6") => Some(py),
            other => {
                let why = format!("no Python with Triton 3.6 at {} ({other:?})", py.display());
                assert!(std::env::var_os("CI").is_none(), "{why} (CI must run this)");
                eprintln!("skipping the Triton 3.6 specs: {why} (scripts/test.sh makes it)");
                None
            }
        }
    }

    #[test]
    fn every_spec_the_harness_emits_checks_against_its_cubin() {
        let Some(py) = python() else { return };
        specs_check_against_their_cubins(
            &py,
            &[
                ("kda.decode", "gpu0,gpu1,gpu2,gpu3,bench"),
                ("kda.prefill", "gpu0,gpu1,bench"),
                ("kda_cuda.decode", "gpu2,bench"),
            ],
        );
    }

    /// The GPU machine runs Triton 3.6, not our pinned version: its specs and cubins (another
    /// compiler, other parameter layouts possible) must check the same way.
    #[test]
    fn specs_emitted_under_triton_3_6_check_against_their_cubins() {
        let Some(py) = python_triton36() else { return };
        specs_check_against_their_cubins(&py, &[("kda.decode", "gpu1,bench"), ("kda.prefill", "gpu0,gpu1,bench")]);
    }

    fn specs_check_against_their_cubins(py: &std::path::Path, kernels: &[(&str, &str)]) {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let out = tempfile::tempdir().expect("tempdir");
        for &(kernel, shapes) in kernels {
            let dir = out.path().join(kernel);
            let run = std::process::Command::new(py)
                .args(["-m", "kernels.harness", "spec", "--kernel", kernel, "--sets", "0", "--shapes", shapes, "--out"])
                .arg(&dir)
                .current_dir(&root)
                .output()
                .expect("runs the harness");
            assert!(run.status.success(), "{kernel}: {}", String::from_utf8_lossy(&run.stdout));
            let mut n = 0;
            for entry in std::fs::read_dir(&dir).expect("spec directories") {
                let d = entry.expect("entry").path();
                let text = std::fs::read_to_string(d.join("launch.json")).expect("launch.json");
                let spec: LaunchSpec = serde_json::from_str(&text).expect("a LaunchSpec");
                let cubin = std::fs::read(d.join(&spec.cubin)).expect("kernel.cubin");
                let launch = check(&spec, &cubin).unwrap_or_else(|r| panic!("{}: {r}", d.display()));
                let pointers = vec![1u64 << 20; launch.pointer_count()];
                assert_eq!(pack(&launch, &pointers).expect("packs").len(), launch.param_bytes);
                n += 1;
            }
            assert_eq!(n, shapes.split(',').count(), "{kernel}");
        }
    }

    // One test per refusal rule: each fails when its rule is removed.

    #[test]
    fn refuses_another_format() {
        assert_eq!(refused(|s| s.format = 2), Refusal::Format(2));
    }

    #[test]
    fn refuses_a_cubin_that_is_not_the_spec_s() {
        assert!(matches!(refused(|s| s.cubin_sha256 = "00".repeat(32)), Refusal::Sha256 { .. }));
    }

    #[test]
    fn refuses_an_entry_the_cubin_does_not_have() {
        let r = refused(|s| s.kernel = "kda_prefill_kernel".into());
        assert_eq!(
            r,
            Refusal::Entry { kernel: "kda_prefill_kernel".into(), entries: vec!["kda_decode_kernel".into()] }
        );
    }

    #[test]
    fn refuses_a_cubin_with_two_entries() {
        let (strtab, symtab) = symbols(&[("k", 1, 2, 4), ("other", 1, 2, 4)]);
        let info = nv_info(&[(0, 8)], Some(8), None, None);
        let bytes = elf(&[(".strtab", 3, strtab), (".symtab", 2, symtab), (".nv.info.k", 0x7000_0000, info)]);
        let mut spec = decode_spec();
        spec.kernel = "k".into();
        spec.cubin_sha256 = sha256_hex(&bytes);
        spec.params = vec![tensor("x", TensorRole::Output, 4)];
        assert!(matches!(check(&spec, &bytes), Err(Refusal::Entry { ref entries, .. }) if entries.len() == 2));
    }

    #[test]
    fn refuses_a_cubin_that_is_not_an_elf() {
        let junk = b"\x7fELF but not really".to_vec();
        let mut spec = decode_spec();
        spec.cubin_sha256 = sha256_hex(&junk);
        assert!(matches!(check(&spec, &junk), Err(Refusal::Elf(_))));
    }

    /// A one-kernel cubin `k` taking one pointer, with extra sections and symbols.
    fn built(extra_syms: &[(&str, u8, u8, u16)], extra_sections: Vec<(&str, u32, Vec<u8>)>) -> (LaunchSpec, Vec<u8>) {
        let mut syms = vec![("k", 1u8, 2u8, 4u16)];
        syms.extend_from_slice(extra_syms);
        let (strtab, symtab) = symbols(&syms);
        let info = nv_info(&[(0, 8)], Some(8), Some([128, 1, 1]), None);
        let mut sections = vec![(".strtab", 3, strtab), (".symtab", 2, symtab), (".nv.info.k", 0x7000_0000, info)];
        sections.extend(extra_sections);
        let bytes = elf(&sections);
        let mut spec = decode_spec();
        spec.kernel = "k".into();
        spec.cubin_sha256 = sha256_hex(&bytes);
        spec.params = vec![tensor("x", TensorRole::Output, 16)];
        (spec, bytes)
    }

    #[test]
    fn refuses_undefined_symbols_but_the_reserved_ones() {
        // what every ptxas cubin has: accepted
        let (spec, bytes) = built(&[(".nv.reservedSmem.offset0", 2, 1, 0), ("", 0, 0, 0)], vec![]);
        check(&spec, &bytes).expect("the reserved-smem and unnamed local placeholders are allowed");
        // a device-runtime launch (dynamic parallelism): refused
        let (spec, bytes) = built(&[("cudaLaunchDeviceV2", 1, 2, 0)], vec![]);
        assert_eq!(check(&spec, &bytes), Err(Refusal::Undefined(vec!["cudaLaunchDeviceV2".into()])));
        // an unnamed undefined symbol that is not LOCAL: refused too
        let (spec, bytes) = built(&[("", 1, 0, 0)], vec![]);
        assert_eq!(check(&spec, &bytes), Err(Refusal::Undefined(vec!["(unnamed)".into()])));
    }

    #[test]
    fn refuses_device_globals() {
        let (spec, bytes) = built(&[("counter", 1, 1, 5)], vec![(".nv.global", 8, Vec::new())]);
        assert_eq!(check(&spec, &bytes), Err(Refusal::DeviceGlobals(vec![".nv.global".into()])));
    }

    #[test]
    fn refuses_a_cubin_without_parameter_info() {
        let (strtab, symtab) = symbols(&[("k", 1, 2, 4)]);
        let bytes = elf(&[(".strtab", 3, strtab), (".symtab", 2, symtab)]);
        let mut spec = decode_spec();
        spec.kernel = "k".into();
        spec.cubin_sha256 = sha256_hex(&bytes);
        assert_eq!(check(&spec, &bytes), Err(Refusal::NoParamInfo(".nv.info.k".into())));
        // the info without the bank size
        let info = nv_info(&[(0, 8)], None, None, None);
        let (strtab, symtab) = symbols(&[("k", 1, 2, 4)]);
        let bytes = elf(&[(".strtab", 3, strtab), (".symtab", 2, symtab), (".nv.info.k", 0x7000_0000, info)]);
        spec.cubin_sha256 = sha256_hex(&bytes);
        spec.params = vec![tensor("x", TensorRole::Output, 16)];
        assert!(matches!(check(&spec, &bytes), Err(Refusal::NoParamInfo(m)) if m.contains("CBANK")));
    }

    #[test]
    fn refuses_a_parameter_count_the_cubin_does_not_take() {
        // the scratch pair forgotten: the driver would read past the argument array
        let r = refused(|s| s.params.truncate(9));
        assert_eq!(r, Refusal::ParamCount { spec: 9, cubin: 11 });
    }

    #[test]
    fn refuses_a_parameter_size_the_cubin_does_not_take() {
        let r =
            refused(|s| s.params[8] = Param::Int { name: "scale".into(), value: 0, bits: 64, divisible_by_16: true });
        assert!(matches!(r, Refusal::ParamSize { index: 8, spec: 8, cubin: 4, .. }), "{r}");
    }

    #[test]
    fn refuses_offsets_the_cubin_does_not_read() {
        // sizes agree one by one, but an i32 before a pointer moves it
        let (strtab, symtab) = symbols(&[("k", 1, 2, 4)]);
        let info = nv_info(&[(0, 4), (4, 8)], Some(12), None, None);
        let bytes = elf(&[(".strtab", 3, strtab), (".symtab", 2, symtab), (".nv.info.k", 0x7000_0000, info)]);
        let mut spec = decode_spec();
        spec.kernel = "k".into();
        spec.block = [64, 1, 1];
        spec.cubin_sha256 = sha256_hex(&bytes);
        spec.params = vec![
            Param::Int { name: "n".into(), value: 3, bits: 32, divisible_by_16: false },
            tensor("x", TensorRole::Output, 16),
        ];
        let r = check(&spec, &bytes);
        assert!(matches!(r, Err(Refusal::ParamOffset { index: 1, spec: 8, cubin: 4, .. })), "{r:?}");
    }

    #[test]
    fn refuses_a_parameter_bank_of_another_size() {
        let (strtab, symtab) = symbols(&[("k", 1, 2, 4)]);
        let info = nv_info(&[(0, 8)], Some(0x10), None, None);
        let bytes = elf(&[(".strtab", 3, strtab), (".symtab", 2, symtab), (".nv.info.k", 0x7000_0000, info)]);
        let mut spec = decode_spec();
        spec.kernel = "k".into();
        spec.cubin_sha256 = sha256_hex(&bytes);
        spec.params = vec![tensor("x", TensorRole::Output, 16)];
        assert_eq!(check(&spec, &bytes), Err(Refusal::CbankSize { spec: 8, cubin: 0x10 }));
    }

    #[test]
    fn refuses_ordinals_out_of_order() {
        let (strtab, symtab) = symbols(&[("k", 1, 2, 4)]);
        let mut info = nv_info(&[(0, 8), (8, 8)], Some(16), None, None);
        // renumber the first KPARAM_INFO entry (ordinal 1, written first) as 2
        let at = info.windows(2).position(|w| w == [0x04, 0x17]).expect("a KPARAM_INFO entry");
        info[at + 8] = 2;
        let bytes = elf(&[(".strtab", 3, strtab), (".symtab", 2, symtab), (".nv.info.k", 0x7000_0000, info)]);
        let mut spec = decode_spec();
        spec.kernel = "k".into();
        spec.cubin_sha256 = sha256_hex(&bytes);
        spec.params = vec![tensor("x", TensorRole::Output, 16), tensor("y", TensorRole::Output, 16)];
        assert_eq!(check(&spec, &bytes), Err(Refusal::Ordinals(2)));
    }

    #[test]
    fn refuses_a_block_that_is_not_reqntid() {
        let r = refused(|s| s.block = [256, 1, 1]);
        assert_eq!(r, Refusal::Reqntid { block: [256, 1, 1], reqntid: [128, 1, 1] });
    }

    #[test]
    fn refuses_a_block_above_maxntid() {
        let (strtab, symtab) = symbols(&[("k", 1, 2, 4)]);
        let info = nv_info(&[(0, 8)], Some(8), None, Some([256, 1, 1]));
        let bytes = elf(&[(".strtab", 3, strtab), (".symtab", 2, symtab), (".nv.info.k", 0x7000_0000, info)]);
        let mut spec = decode_spec();
        spec.kernel = "k".into();
        spec.cubin_sha256 = sha256_hex(&bytes);
        spec.params = vec![tensor("x", TensorRole::Output, 16)];
        spec.block = [256, 1, 1];
        check(&spec, &bytes).expect("at the maximum");
        spec.block = [512, 1, 1];
        assert_eq!(check(&spec, &bytes), Err(Refusal::Maxntid { block: [512, 1, 1], maxntid: [256, 1, 1] }));
        spec.block = [128, 2, 1];
        assert!(matches!(check(&spec, &bytes), Err(Refusal::Maxntid { .. })));
    }

    #[test]
    fn refuses_impossible_blocks_grids_and_shared_memory() {
        assert_eq!(refused(|s| s.block = [0, 1, 1]), Refusal::Block([0, 1, 1]));
        assert_eq!(refused(|s| s.block = [2048, 1, 1]), Refusal::Block([2048, 1, 1]));
        assert_eq!(refused(|s| s.grid = [4, 70000, 1]), Refusal::Grid([4, 70000, 1]));
        assert_eq!(refused(|s| s.grid = [0, 1, 1]), Refusal::Grid([0, 1, 1]));
        assert_eq!(refused(|s| s.shared_bytes = MAX_SHARED_BYTES + 1), Refusal::Shared(MAX_SHARED_BYTES + 1));
    }

    #[test]
    fn refuses_ints_that_break_the_cubins_assumptions() {
        // the decode cubin has no int parameter: a CUDA-like layout of two ints
        let (strtab, symtab) = symbols(&[("k", 1, 2, 4)]);
        let info = nv_info(&[(0, 4), (8, 8)], Some(16), None, None);
        let bytes = elf(&[(".strtab", 3, strtab), (".symtab", 2, symtab), (".nv.info.k", 0x7000_0000, info)]);
        let with = |a: Param, b: Param| {
            let mut spec = decode_spec();
            spec.kernel = "k".into();
            spec.cubin_sha256 = sha256_hex(&bytes);
            spec.params = vec![a, b];
            check(&spec, &bytes)
        };
        let int = |v: i64, bits: u32, d: bool| Param::Int { name: "T".into(), value: v, bits, divisible_by_16: d };
        with(int(64, 32, true), int(1 << 40, 64, false)).expect("within the assumptions");
        assert_eq!(
            with(int(63, 32, true), int(0, 64, false)),
            Err(Refusal::NotDivisible { name: "T".into(), value: 63 })
        );
        assert_eq!(
            with(int(1 << 31, 32, false), int(0, 64, false)),
            Err(Refusal::IntRange { name: "T".into(), value: 1 << 31, bits: 32 })
        );
        assert_eq!(with(int(1, 16, false), int(0, 64, false)), Err(Refusal::IntWidth { name: "T".into(), bits: 16 }));
    }

    #[test]
    fn refuses_floats_that_are_not_finite_f32() {
        let r = refused(|s| s.params[8] = Param::Float { name: "scale".into(), value: 1e39 });
        assert!(matches!(r, Refusal::Float { .. }), "{r}");
        let r = refused(|s| s.params[8] = Param::Float { name: "scale".into(), value: f64::NAN });
        assert!(matches!(r, Refusal::Float { .. }), "{r}");
    }

    #[test]
    fn refuses_alignments_the_gate_cannot_honour() {
        let r = refused(|s| s.params[0] = tensor("q", TensorRole::Input, 12));
        assert_eq!(r, Refusal::Align { name: "q".into(), align: 12 });
        let r = refused(|s| s.params[0] = tensor("q", TensorRole::Input, 512));
        assert_eq!(r, Refusal::Align { name: "q".into(), align: 512 });
    }

    type Edit = Box<dyn Fn(&mut LaunchSpec)>;

    #[test]
    fn refuses_what_this_version_does_not_launch() {
        let cases: [(&str, Edit); 8] = [
            ("num_ctas = 2", Box::new(|s| s.num_ctas = 2)),
            ("cooperative", Box::new(|s| s.cooperative = true)),
            ("PDL", Box::new(|s| s.pdl = true)),
            ("tensor descriptors", Box::new(|s| s.tensor_descriptors = 1)),
            ("profile scratch", Box::new(|s| s.profile_scratch_bytes = 64)),
            ("alignment 3", Box::new(|s| s.global_scratch_align = 3)),
            (
                "no global scratch parameter",
                Box::new(|s| {
                    s.global_scratch_bytes = 64;
                    s.params.retain(|p| !matches!(p, Param::Scratch { which: ScratchKind::Global }));
                }),
            ),
            ("more than one", Box::new(|s| s.params.push(Param::Scratch { which: ScratchKind::Profile }))),
        ];
        for (what, f) in cases {
            match refused(f) {
                Refusal::Unsupported(m) => assert!(m.contains(what), "{what}: {m}"),
                r => panic!("{what}: {r}"),
            }
        }
        // global scratch with its pointer is launched (Rust allocates it)
        let mut spec = decode_spec();
        spec.global_scratch_bytes = 64;
        check(&spec, DECODE).expect("global scratch with its parameter");
    }
}
