//! Where kernels run.

use serde::{Deserialize, Serialize};

/// Where kernels run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[derive(strum::Display, strum::EnumString, strum::IntoStaticStr, strum::VariantArray)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Device {
    /// A GPU when the harness finds one, else the CPU.
    #[default]
    Auto,
    /// The CPU (Triton's interpreter, the CUDA emulation): no speed gate.
    Cpu,
    /// A CUDA GPU; without one (no driver library, no torch, no device) the
    /// checks that need it are `needs-gpu`, naming what is missing.
    Cuda,
}

kidiom_syntax::named_enum!(Device);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_have_names() {
        assert_eq!(Device::from_name("cuda"), Some(Device::Cuda));
        assert_eq!(Device::from_name("tpu"), None);
    }
}
