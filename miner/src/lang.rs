use std::path::Path;

use serde::{Deserialize, Serialize};

/// A source language kidiom parses.
///
/// Detection is by extension only: Triton is Python, and whether a Python
/// function is a Triton kernel is decided by its decorators at parse time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[derive(strum::Display, strum::EnumString, strum::IntoStaticStr, strum::VariantArray)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Lang {
    /// `.py`: Python, including Triton kernels.
    Python,
    /// `.cu .cuh`: CUDA C++ (tree-sitter-cuda, which knows `__launch_bounds__`).
    Cuda,
    /// `.cpp .cc .cxx .h .hpp`: C++ (bindings, host code, headers).
    Cpp,
    /// `.rs`: Rust (syn), for PyO3 bindings.
    Rust,
}

impl Lang {
    /// Every language, for tests and listings.
    pub const ALL: &'static [Lang] = <Lang as strum::VariantArray>::VARIANTS;

    /// The language of a path, by extension; `None` for files kidiom does not read.
    pub fn from_path(path: &Path) -> Option<Lang> {
        let ext = path.extension()?.to_str()?;
        Some(match ext {
            "py" => Lang::Python,
            "cu" | "cuh" => Lang::Cuda,
            "cpp" | "cc" | "cxx" | "h" | "hpp" => Lang::Cpp,
            "rs" => Lang::Rust,
            _ => return None,
        })
    }

    /// The lowercase name used in the catalog and on the command line.
    pub fn name(self) -> &'static str {
        self.into()
    }

    /// Parses a name as printed by [`Lang::name`].
    pub fn from_name(name: &str) -> Option<Lang> {
        name.parse().ok()
    }

    /// Short prefix for pattern ids.
    pub(crate) fn slug(self) -> &'static str {
        match self {
            Lang::Python => "py",
            Lang::Cuda => "cu",
            Lang::Cpp => "cpp",
            Lang::Rust => "rs",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_by_extension() {
        let cases = [
            ("a/b.py", Some(Lang::Python)),
            ("k.cu", Some(Lang::Cuda)),
            ("k.cuh", Some(Lang::Cuda)),
            ("x.hpp", Some(Lang::Cpp)),
            ("x.cc", Some(Lang::Cpp)),
            ("lib.rs", Some(Lang::Rust)),
            ("README.md", None),
            ("Makefile", None),
        ];
        for (p, want) in cases {
            assert_eq!(Lang::from_path(Path::new(p)), want, "{p}");
        }
        for &l in Lang::ALL {
            assert_eq!(Lang::from_name(l.name()), Some(l));
        }
    }
}
