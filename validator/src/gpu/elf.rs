//! What a cubin says about its one kernel, read from its ELF without a GPU:
//! the entry symbol, the parameter layout of `.nv.info.<kernel>`, the block
//! size it was compiled for, the symbols it leaves undefined and whether it
//! holds device globals (`.nv.global`).
//!
//! A cubin is a 64-bit little-endian ELF with `e_machine = EM_CUDA` (190).
//! `.nv.info.<kernel>` is a sequence of attributes, each a format byte and
//! an attribute byte, then:
//!
//! | format | name | then |
//! |---|---|---|
//! | 0x01 | `EIFMT_NVAL` | two unused bytes |
//! | 0x02 | `EIFMT_BVAL` | a u8 value and a pad byte |
//! | 0x03 | `EIFMT_HVAL` | a u16 value |
//! | 0x04 | `EIFMT_SVAL` | a u16 size, then that many bytes |
//!
//! (measured on the cubins of our kernels, Triton 3.9 / ptxas 13.4 and
//! NVRTC + ptxas: every entry that is not `SVAL` takes four bytes; our cubins
//! hold no `NVAL` entry, so its width is the one assumption here). The
//! attributes read, with the codes `cuobjdump -elf` prints names for:
//!
//! | code | attribute | value |
//! |---|---|---|
//! | 0x17 | `EIATTR_KPARAM_INFO` | SVAL, 12 bytes: u32 index, u16 ordinal, u16 offset, u32 flags whose bits 18..32 are the size |
//! | 0x19 | `EIATTR_CBANK_PARAM_SIZE` | HVAL: bytes of the parameter constant bank |
//! | 0x10 | `EIATTR_REQNTID` | SVAL, 3 x u32: the block the kernel requires (`.reqntid`, Triton's `32 x num_warps`) |
//! | 0x05 | `EIATTR_MAXNTID` | SVAL, 3 x u32: the largest block (`__launch_bounds__`, `.maxntid`) |
//!
//! Everything else is skipped by its size. A malformed section (an entry
//! running past its end, a `KPARAM_INFO` of the wrong size) is an
//! [`ElfError`], never a guess.

use std::collections::BTreeMap;

/// `e_machine` of a CUDA ELF.
pub const EM_CUDA: u16 = 190;

/// `EIATTR_MAXNTID`.
pub const EIATTR_MAXNTID: u8 = 0x05;
/// `EIATTR_REQNTID`.
pub const EIATTR_REQNTID: u8 = 0x10;
/// `EIATTR_KPARAM_INFO`.
pub const EIATTR_KPARAM_INFO: u8 = 0x17;
/// `EIATTR_CBANK_PARAM_SIZE`.
pub const EIATTR_CBANK_PARAM_SIZE: u8 = 0x19;

const SHT_SYMTAB: u32 = 2;
const STB_LOCAL: u8 = 0;
const STB_GLOBAL: u8 = 1;
const STT_FUNC: u8 = 2;

/// Why a cubin's ELF could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ElfError {
    /// Not a 64-bit little-endian ELF.
    #[error("not a 64-bit little-endian ELF file")]
    NotElf64,
    /// An ELF for another machine.
    #[error("ELF machine {0}, not EM_CUDA (190)")]
    NotCuda(u16),
    /// A header, table or section that runs past the file's end.
    #[error("truncated ELF: {0} runs past the end of the file")]
    Truncated(String),
    /// A name that is not valid UTF-8 or not terminated.
    #[error("bad name in {0}")]
    BadName(String),
    /// A `.nv.info.<kernel>` entry that cannot be read.
    #[error("{section}: {what} at byte {offset:#x}")]
    NvInfo {
        /// The section.
        section: String,
        /// Its byte offset within the section.
        offset: usize,
        /// What is wrong.
        what: String,
    },
}

/// One symbol of the cubin's symbol table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol {
    /// Its name (empty for an unnamed one).
    pub name: String,
    /// `STB_*` (0 local, 1 global, 2 weak).
    pub bind: u8,
    /// `STT_*` (0 none, 1 object, 2 function, 3 section).
    pub kind: u8,
    /// The section it is defined in; 0 when undefined.
    pub shndx: u16,
}

/// One `EIATTR_KPARAM_INFO` entry: where the kernel reads one parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KParam {
    /// The parameter's position in the signature.
    pub ordinal: u16,
    /// Its byte offset in the parameter bank (and in the packed buffer).
    pub offset: u16,
    /// Its size in bytes.
    pub size: u16,
}

/// The `.nv.info.<kernel>` attributes this module reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelInfo {
    /// The parameters, by ordinal.
    pub params: Vec<KParam>,
    /// `EIATTR_CBANK_PARAM_SIZE`.
    pub cbank_param_size: Option<u16>,
    /// `EIATTR_REQNTID`.
    pub reqntid: Option<[u32; 3]>,
    /// `EIATTR_MAXNTID`.
    pub maxntid: Option<[u32; 3]>,
}

/// What the cubin says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cubin {
    /// Section names, in order.
    pub sections: Vec<String>,
    /// Every symbol but the null one at index 0.
    pub symbols: Vec<Symbol>,
    /// `.nv.info.<kernel>` per kernel name.
    pub kernels: BTreeMap<String, KernelInfo>,
}

impl Cubin {
    /// Reads a cubin's ELF.
    pub fn parse(bytes: &[u8]) -> Result<Cubin, ElfError> {
        parse(bytes)
    }

    /// The GLOBAL FUNC symbols: a kernel compiled alone has exactly one.
    pub fn entries(&self) -> Vec<&str> {
        self.symbols
            .iter()
            .filter(|s| s.bind == STB_GLOBAL && s.kind == STT_FUNC && s.shndx != 0)
            .map(|s| s.name.as_str())
            .collect()
    }

    /// The undefined symbols other than those every cubin of ptxas has: the
    /// reserved shared memory (`.nv.reservedSmem.*`) and an unnamed LOCAL
    /// placeholder. Anything else needs a link the gate never makes (the
    /// device runtime of dynamic parallelism, another module's functions).
    pub fn foreign_undefined(&self) -> Vec<&Symbol> {
        self.symbols
            .iter()
            .filter(|s| s.shndx == 0)
            .filter(|s| !s.name.starts_with(".nv.reservedSmem."))
            .filter(|s| !(s.name.is_empty() && s.bind == STB_LOCAL))
            .collect()
    }

    /// The device-global sections (`.nv.global`, `.nv.global.init`): memory
    /// that outlives a launch.
    pub fn global_sections(&self) -> Vec<&str> {
        self.sections
            .iter()
            .filter(|n| *n == ".nv.global" || n.starts_with(".nv.global."))
            .map(String::as_str)
            .collect()
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl Reader<'_> {
    fn slice(&self, at: u64, len: u64, what: &str) -> Result<&[u8], ElfError> {
        let end = at.checked_add(len).filter(|e| *e <= self.bytes.len() as u64);
        match end {
            // both fit in usize: they are at most the slice's length
            Some(end) => Ok(&self.bytes[at as usize..end as usize]),
            None => Err(ElfError::Truncated(what.to_owned())),
        }
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

struct Shdr {
    name: u32,
    kind: u32,
    offset: u64,
    size: u64,
    link: u32,
    entsize: u64,
}

fn name_at(table: &[u8], at: u32, what: &str) -> Result<String, ElfError> {
    let rest = table.get(at as usize..).ok_or_else(|| ElfError::BadName(what.to_owned()))?;
    let end = rest.iter().position(|&c| c == 0).ok_or_else(|| ElfError::BadName(what.to_owned()))?;
    String::from_utf8(rest[..end].to_vec()).map_err(|_| ElfError::BadName(what.to_owned()))
}

fn parse(bytes: &[u8]) -> Result<Cubin, ElfError> {
    let r = Reader { bytes };
    let eh = r.slice(0, 64, "the ELF header").map_err(|_| ElfError::NotElf64)?;
    // magic, ELFCLASS64, ELFDATA2LSB
    if eh[..4] != [0x7f, b'E', b'L', b'F'] || eh[4] != 2 || eh[5] != 1 {
        return Err(ElfError::NotElf64);
    }
    let machine = u16_at(eh, 18);
    if machine != EM_CUDA {
        return Err(ElfError::NotCuda(machine));
    }
    let shoff = u64_at(eh, 0x28);
    let shentsize = u64::from(u16_at(eh, 0x3a));
    let shnum = u64::from(u16_at(eh, 0x3c));
    let shstrndx = u16_at(eh, 0x3e) as usize;
    if shentsize < 64 {
        return Err(ElfError::Truncated("a section header".into()));
    }
    let table = r.slice(shoff, shentsize.saturating_mul(shnum), "the section header table")?;
    let headers: Vec<Shdr> = (0..shnum as usize)
        .map(|i| {
            let h = &table[i * shentsize as usize..];
            Shdr {
                name: u32_at(h, 0),
                kind: u32_at(h, 4),
                offset: u64_at(h, 0x18),
                size: u64_at(h, 0x20),
                link: u32_at(h, 0x28),
                entsize: u64_at(h, 0x38),
            }
        })
        .collect();
    let shstr = headers.get(shstrndx).ok_or_else(|| ElfError::Truncated("the section name table".into()))?;
    let shstr = r.slice(shstr.offset, shstr.size, "the section name table")?;
    let mut sections = Vec::with_capacity(headers.len());
    for h in &headers {
        sections.push(name_at(shstr, h.name, "the section name table")?);
    }

    let mut symbols = Vec::new();
    for h in headers.iter().filter(|h| h.kind == SHT_SYMTAB) {
        let data = r.slice(h.offset, h.size, ".symtab")?;
        let strtab = headers.get(h.link as usize).ok_or_else(|| ElfError::Truncated(".strtab".into()))?;
        let strtab = r.slice(strtab.offset, strtab.size, ".strtab")?;
        let ent = if h.entsize == 0 { 24 } else { h.entsize as usize };
        if ent < 24 {
            return Err(ElfError::Truncated("a symbol".into()));
        }
        // index 0 is the null symbol
        for s in data.chunks_exact(ent).skip(1) {
            symbols.push(Symbol {
                name: name_at(strtab, u32_at(s, 0), ".strtab")?,
                bind: s[4] >> 4,
                kind: s[4] & 0xf,
                shndx: u16_at(s, 6),
            });
        }
    }

    let mut kernels = BTreeMap::new();
    for (h, name) in headers.iter().zip(&sections) {
        if let Some(kernel) = name.strip_prefix(".nv.info.") {
            let data = r.slice(h.offset, h.size, name)?;
            kernels.insert(kernel.to_owned(), nv_info(name, data)?);
        }
    }
    Ok(Cubin { sections, symbols, kernels })
}

fn nv_info(section: &str, d: &[u8]) -> Result<KernelInfo, ElfError> {
    let bad =
        |offset: usize, what: &str| ElfError::NvInfo { section: section.to_owned(), offset, what: what.to_owned() };
    let mut info = KernelInfo::default();
    let mut at = 0;
    while at < d.len() {
        if at + 4 > d.len() {
            return Err(bad(at, "an attribute header runs past the section"));
        }
        let (format, attr) = (d[at], d[at + 1]);
        let (value, next) = match format {
            0x01..=0x03 => (&d[at + 2..at + 4], at + 4),
            0x04 => {
                let n = u16_at(d, at + 2) as usize;
                if at + 4 + n > d.len() {
                    return Err(bad(at, "an attribute's value runs past the section"));
                }
                (&d[at + 4..at + 4 + n], at + 4 + n)
            }
            f => return Err(bad(at, &format!("unknown attribute format {f:#04x}"))),
        };
        match (attr, format) {
            (EIATTR_KPARAM_INFO, 0x04) => {
                if value.len() != 12 {
                    return Err(bad(at, &format!("EIATTR_KPARAM_INFO of {} bytes, not 12", value.len())));
                }
                let flags = u32_at(value, 8);
                info.params.push(KParam {
                    ordinal: u16_at(value, 4),
                    offset: u16_at(value, 6),
                    size: ((flags >> 18) & 0x3fff) as u16,
                });
            }
            (EIATTR_CBANK_PARAM_SIZE, 0x03) => info.cbank_param_size = Some(u16_at(value, 0)),
            (EIATTR_REQNTID | EIATTR_MAXNTID, 0x04) => {
                if value.len() != 12 {
                    return Err(bad(at, &format!("a thread count of {} bytes, not 12", value.len())));
                }
                let dims = [u32_at(value, 0), u32_at(value, 4), u32_at(value, 8)];
                if attr == EIATTR_REQNTID {
                    info.reqntid = Some(dims);
                } else {
                    info.maxntid = Some(dims);
                }
            }
            (EIATTR_KPARAM_INFO | EIATTR_CBANK_PARAM_SIZE | EIATTR_REQNTID | EIATTR_MAXNTID, f) => {
                return Err(bad(at, &format!("attribute {attr:#04x} in format {f:#04x}")));
            }
            _ => {}
        }
        at = next;
    }
    info.params.sort_by_key(|p| p.ordinal);
    Ok(info)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The decode kernel's cubin at its bench shape, compiled here from
    /// `kernels/kda/decode.py` by `python -m kernels.harness spec` (Triton
    /// 3.9.0, ptxas 13.4): see `tests/fixtures/gpu/README.md`.
    pub(crate) const DECODE: &[u8] = include_bytes!("../../tests/fixtures/gpu/kda_decode_bench.cubin");

    /// A minimal CUDA ELF: the given sections (name, type, data) after the
    /// null section and `.shstrtab`; a `.symtab` (type 2) links to the
    /// section named `.strtab`.
    pub(crate) fn elf(sections: &[(&str, u32, Vec<u8>)]) -> Vec<u8> {
        let mut shstr = vec![0u8];
        let mut names = Vec::new();
        for (n, _, _) in std::iter::once(&(".shstrtab", 3, Vec::new())).chain(sections) {
            names.push(shstr.len() as u32);
            shstr.extend_from_slice(n.as_bytes());
            shstr.push(0);
        }
        let mut body = Vec::new();
        let mut placed = Vec::new(); // (offset, size)
        for data in std::iter::once(&shstr).chain(sections.iter().map(|s| &s.2)) {
            placed.push((64 + body.len() as u64, data.len() as u64));
            body.extend_from_slice(data);
        }
        let shoff = 64 + body.len() as u64;
        let strtab = sections.iter().position(|s| s.0 == ".strtab").map_or(0, |i| i + 2) as u32;
        let mut out = vec![0u8; 64];
        out[..6].copy_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1]);
        out[18..20].copy_from_slice(&EM_CUDA.to_le_bytes());
        out[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
        out[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        out[0x3c..0x3e].copy_from_slice(&((sections.len() + 2) as u16).to_le_bytes());
        out[0x3e..0x40].copy_from_slice(&1u16.to_le_bytes());
        out.extend_from_slice(&body);
        out.extend_from_slice(&[0u8; 64]); // the null section
        let kinds = std::iter::once(3).chain(sections.iter().map(|s| s.1));
        for ((name, kind), (off, size)) in names.iter().zip(kinds).zip(placed) {
            let mut h = [0u8; 64];
            h[0..4].copy_from_slice(&name.to_le_bytes());
            h[4..8].copy_from_slice(&kind.to_le_bytes());
            h[0x18..0x20].copy_from_slice(&off.to_le_bytes());
            h[0x20..0x28].copy_from_slice(&size.to_le_bytes());
            if kind == SHT_SYMTAB {
                h[0x28..0x2c].copy_from_slice(&strtab.to_le_bytes());
                h[0x38..0x40].copy_from_slice(&24u64.to_le_bytes());
            }
            out.extend_from_slice(&h);
        }
        out
    }

    /// (`.strtab`, `.symtab`) of symbols (name, bind, kind, shndx).
    pub(crate) fn symbols(syms: &[(&str, u8, u8, u16)]) -> (Vec<u8>, Vec<u8>) {
        let mut strtab = vec![0u8];
        let mut symtab = vec![0u8; 24];
        for (name, bind, kind, shndx) in syms {
            let at = if name.is_empty() {
                0
            } else {
                let at = strtab.len() as u32;
                strtab.extend_from_slice(name.as_bytes());
                strtab.push(0);
                at
            };
            let mut s = [0u8; 24];
            s[0..4].copy_from_slice(&at.to_le_bytes());
            s[4] = (bind << 4) | kind;
            s[6..8].copy_from_slice(&shndx.to_le_bytes());
            symtab.extend_from_slice(&s);
        }
        (strtab, symtab)
    }

    /// `.nv.info.<kernel>` bytes: KPARAM_INFO per (offset, size), then the
    /// CBANK size, REQNTID and MAXNTID when given.
    pub(crate) fn nv_info(
        params: &[(u16, u16)],
        cbank: Option<u16>,
        reqntid: Option<[u32; 3]>,
        maxntid: Option<[u32; 3]>,
    ) -> Vec<u8> {
        let mut d = vec![0x04, 0x37, 4, 0, 0x86, 0, 0, 0]; // CUDA_API_VERSION, skipped
        for (i, (offset, size)) in params.iter().enumerate().rev() {
            d.extend_from_slice(&[0x04, EIATTR_KPARAM_INFO, 12, 0, 0, 0, 0, 0]);
            d.extend_from_slice(&(i as u16).to_le_bytes());
            d.extend_from_slice(&offset.to_le_bytes());
            d.extend_from_slice(&((u32::from(*size) << 18) | 0x1f000).to_le_bytes());
        }
        d.extend_from_slice(&[0x02, 0x4c, 1, 0]); // NUM_BARRIERS (BVAL), skipped
        for (attr, dims) in [(EIATTR_REQNTID, reqntid), (EIATTR_MAXNTID, maxntid)] {
            if let Some(dims) = dims {
                d.extend_from_slice(&[0x04, attr, 12, 0]);
                for x in dims {
                    d.extend_from_slice(&x.to_le_bytes());
                }
            }
        }
        if let Some(c) = cbank {
            d.extend_from_slice(&[0x03, EIATTR_CBANK_PARAM_SIZE]);
            d.extend_from_slice(&c.to_le_bytes());
        }
        d
    }

    #[test]
    fn reads_the_decode_cubin_as_the_design_notes_measured_it() {
        let c = Cubin::parse(DECODE).expect("the decode cubin parses");
        assert_eq!(c.entries(), ["kda_decode_kernel"]);
        let k = &c.kernels["kda_decode_kernel"];
        let expected: Vec<KParam> = (0..8)
            .map(|i| KParam { ordinal: i, offset: 8 * i, size: 8 })
            .chain([
                KParam { ordinal: 8, offset: 0x40, size: 4 },
                KParam { ordinal: 9, offset: 0x48, size: 8 },
                KParam { ordinal: 10, offset: 0x50, size: 8 },
            ])
            .collect();
        assert_eq!(k.params, expected);
        assert_eq!(k.cbank_param_size, Some(0x58));
        assert_eq!(k.reqntid, Some([128, 1, 1]));
        assert_eq!(k.maxntid, None);
        assert!(c.foreign_undefined().is_empty(), "{:?}", c.foreign_undefined());
        // the two undefined symbols every ptxas cubin has are there, and allowed
        assert!(c.symbols.iter().any(|s| s.shndx == 0 && s.name == ".nv.reservedSmem.offset0"));
        assert!(c.symbols.iter().any(|s| s.shndx == 0 && s.name.is_empty() && s.bind == STB_LOCAL));
        assert!(c.global_sections().is_empty());
    }

    #[test]
    fn reads_a_built_elf_and_what_it_must_refuse() {
        let (strtab, symtab) = symbols(&[
            ("k", STB_GLOBAL, STT_FUNC, 4),
            ("cudaLaunchDeviceV2", STB_GLOBAL, STT_FUNC, 0),
            ("counter", STB_GLOBAL, 1, 5),
        ]);
        let info = nv_info(&[(0, 8), (8, 4)], Some(12), None, Some([256, 1, 1]));
        let bytes = elf(&[
            (".strtab", 3, strtab),
            (".symtab", 2, symtab),
            (".nv.info.k", 0x7000_0000, info),
            (".nv.global", 8, Vec::new()),
        ]);
        let c = Cubin::parse(&bytes).expect("parses");
        assert_eq!(c.entries(), ["k"]);
        assert_eq!(c.foreign_undefined().iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["cudaLaunchDeviceV2"]);
        assert_eq!(c.global_sections(), [".nv.global"]);
        let k = &c.kernels["k"];
        assert_eq!(k.params[1], KParam { ordinal: 1, offset: 8, size: 4 });
        assert_eq!((k.cbank_param_size, k.reqntid, k.maxntid), (Some(12), None, Some([256, 1, 1])));
    }

    #[test]
    fn malformed_files_are_errors_not_guesses() {
        assert_eq!(Cubin::parse(b"not an elf"), Err(ElfError::NotElf64));
        let mut other = DECODE.to_vec();
        other[18] = 62; // EM_X86_64
        assert_eq!(Cubin::parse(&other), Err(ElfError::NotCuda(62)));
        assert!(matches!(Cubin::parse(&DECODE[..DECODE.len() / 2]), Err(ElfError::Truncated(_))));
        // a KPARAM_INFO entry whose value runs past the section
        let mut info = nv_info(&[(0, 8)], Some(8), None, None);
        info.truncate(info.len() - 8);
        info.extend_from_slice(&[0x04, EIATTR_KPARAM_INFO, 12, 0, 0]);
        let bytes = elf(&[(".nv.info.k", 0x7000_0000, info)]);
        assert!(matches!(Cubin::parse(&bytes), Err(ElfError::NvInfo { .. })), "{:?}", Cubin::parse(&bytes));
        // an attribute format nobody defined
        let bytes = elf(&[(".nv.info.k", 0x7000_0000, vec![0x09, 0x17, 0, 0])]);
        assert!(matches!(Cubin::parse(&bytes), Err(ElfError::NvInfo { .. })));
    }
}
