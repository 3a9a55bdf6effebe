//! Macros that declare device code (`#define DEV __device__ inline`): the
//! ones corpora use from libraries they do not contain, the ones a file
//! defines, and how definitions from several files merge. Kernel finding
//! ([`crate::kernel_ranges`]) and the miner's C++ extractor expand them.

use std::collections::BTreeMap;

/// Macro name -> the tokens it expands to, for macros that declare device code.
pub type DeviceMacros = BTreeMap<String, String>;

/// Macros from libraries that corpora include but do not contain (CUTLASS,
/// CuTe, PyTorch), with what they expand to on the device.
pub const KNOWN_DEVICE_MACROS: &[(&str, &str)] = &[
    ("CUTLASS_DEVICE", "__forceinline__ __device__"),
    ("CUTLASS_HOST_DEVICE", "__forceinline__ __host__ __device__"),
    ("CUTLASS_GLOBAL", "__global__"),
    ("CUTE_DEVICE", "__forceinline__ __device__"),
    ("CUTE_HOST_DEVICE", "__forceinline__ __host__ __device__"),
    ("CUTE_HOST", "__forceinline__ __host__"),
    ("C10_DEVICE", "__device__"),
    ("C10_HOST_DEVICE", "__host__ __device__"),
    ("C10_LAUNCH_BOUNDS_1", "__launch_bounds__"),
];

/// The CUDA qualifiers whose presence in a macro body makes it a device macro.
pub const DEVICE_WORDS: [&str; 5] = ["__device__", "__global__", "__host__", "__forceinline__", "__launch_bounds__"];

/// [`KNOWN_DEVICE_MACROS`] as a map, the start of every file's macros.
pub fn known_device_macros() -> DeviceMacros {
    KNOWN_DEVICE_MACROS.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

/// Adds a macro definition. A name defined differently in several files
/// (`#ifdef` branches) keeps the most device-like body, so the result does
/// not depend on the order files were read in.
pub fn merge_device_macro(macros: &mut DeviceMacros, name: String, body: String) {
    let rank = |b: &str| (b.contains("__global__"), b.contains("__device__"), b.len(), b.to_string());
    match macros.get(&name) {
        Some(old) if rank(old) >= rank(&body) => {}
        _ => {
            macros.insert(name, body);
        }
    }
}

/// Finds `#define NAME ...` lines whose body declares device code.
pub fn scan_device_macros(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for pos in memchr::memmem::find_iter(text.as_bytes(), b"#define") {
        let line_end = text[pos..].find('\n').map(|e| pos + e).unwrap_or(text.len());
        let line = &text[pos + 7..line_end];
        let mut parts = line.trim_start().splitn(2, |c: char| c.is_whitespace());
        let (Some(name), Some(body)) = (parts.next(), parts.next()) else { continue };
        if name.contains('(') || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        if DEVICE_WORDS.iter().any(|w| body.split_whitespace().any(|t| t == *w)) {
            out.push((name.to_string(), body.trim().to_string()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scans_device_defines() {
        let src = "#define A __device__ inline\n#define B(x) __device__ x\n#define C 3\n";
        assert_eq!(scan_device_macros(src), vec![("A".to_string(), "__device__ inline".to_string())]);
    }
}
