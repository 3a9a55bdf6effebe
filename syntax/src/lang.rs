use std::path::Path;

use serde::{Deserialize, Serialize};

/// The names of an enum whose spelling strum derives (`Display`,
/// `EnumString`, `IntoStaticStr`, `VariantArray` with `serialize_all` in the
/// case of its serde `rename_all`): `ALL`, `name()` and `from_name()`, the
/// same for every such enum of the workspace.
#[macro_export]
macro_rules! named_enum {
    ($t:ty) => {
        impl $t {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$t] = <$t as strum::VariantArray>::VARIANTS;

            /// The name printed, stored and given on the command line.
            pub fn name(self) -> &'static str {
                self.into()
            }

            /// Parses a name as [`Self::name`] prints it.
            pub fn from_name(name: &str) -> Option<$t> {
                name.parse().ok()
            }
        }
    };
}

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

named_enum!(Lang);

impl Lang {
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

    /// Short prefix for pattern ids.
    pub fn slug(self) -> &'static str {
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
