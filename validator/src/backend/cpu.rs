//! Static metrics without a GPU: the harness's ahead-of-time `compile`
//! (Triton for sm_90, or NVRTC + ptxas), read into numbers that can be
//! compared before and after a rewrite.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What the compiler says about one kernel build.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StaticMetrics {
    /// Target (`sm_90a`).
    pub arch: String,
    /// Registers per thread.
    pub registers: Option<i64>,
    /// Bytes spilled to local memory (stores).
    pub spill_store_bytes: Option<i64>,
    /// Bytes reloaded from spills.
    pub spill_load_bytes: Option<i64>,
    /// Stack frame.
    pub stack_bytes: Option<i64>,
    /// Local memory.
    pub local_bytes: Option<i64>,
    /// Static shared memory.
    pub shared_static_bytes: Option<i64>,
    /// Dynamic shared memory (Triton).
    pub shared_dynamic_bytes: Option<i64>,
    /// SASS instructions in total.
    pub instructions: Option<i64>,
    /// SASS instructions by class (`fp32`, `tensor`, `global_load`, ...).
    pub by_class: BTreeMap<String, i64>,
    /// SASS instructions by base opcode.
    pub by_opcode: BTreeMap<String, i64>,
    /// Compile time of the kernel itself (Triton).
    pub compile_seconds: Option<f64>,
}

impl StaticMetrics {
    /// Reads the `compile` command's JSON (wire format v1); what does not
    /// fit is left out (the gates read it strictly, through the wire types).
    pub fn from_compile_json(v: &serde_json::Value) -> StaticMetrics {
        serde_json::from_value::<crate::wire::Compile>(v.clone())
            .map(|c| StaticMetrics::from_wire(&c))
            .unwrap_or_default()
    }

    pub(crate) fn from_wire(c: &crate::wire::Compile) -> StaticMetrics {
        let r = &c.resources;
        let ins = c.instructions.as_ref();
        StaticMetrics {
            arch: c.arch.clone(),
            registers: r.registers,
            spill_store_bytes: r.spill_store_bytes,
            spill_load_bytes: r.spill_load_bytes,
            stack_bytes: r.stack_bytes,
            local_bytes: r.local_bytes,
            shared_static_bytes: r.shared_static_bytes,
            shared_dynamic_bytes: r.shared_dynamic_bytes,
            instructions: ins.map(|i| i.total),
            by_class: ins.map(|i| i.by_class.clone()).unwrap_or_default(),
            by_opcode: ins.map(|i| i.by_opcode.clone()).unwrap_or_default(),
            compile_seconds: c.triton.as_ref().and_then(|t| t.compile_seconds),
        }
    }

    /// A one-line summary: `regs 255, spills 2008/2572 B, smem 1024+122880 B, 6960 instr (fp32 2712, tensor 104, ...)`.
    pub fn summary(&self) -> String {
        if self.registers.is_none() && self.spill_store_bytes.is_none() {
            // a host build: no registers or spills to speak of, only its instructions
            let mut ops: Vec<(&String, &i64)> = self.by_class.iter().collect();
            ops.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            let top: Vec<String> = ops.iter().take(5).map(|(k, v)| format!("{k} {v}")).collect();
            return match self.instructions {
                Some(n) if top.is_empty() => format!("{n} instr"),
                Some(n) => format!("{n} instr ({})", top.join(", ")),
                None => "built".to_string(),
            };
        }
        let o = |x: Option<i64>| x.map(|v| v.to_string()).unwrap_or_else(|| "?".into());
        let mut classes: Vec<(&String, &i64)> = self.by_class.iter().collect();
        classes.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let top: Vec<String> = classes.iter().take(5).map(|(k, v)| format!("{k} {v}")).collect();
        format!(
            "regs {}, spills {}/{} B, smem {}+{} B, {} instr ({})",
            o(self.registers),
            o(self.spill_store_bytes),
            o(self.spill_load_bytes),
            o(self.shared_static_bytes),
            o(self.shared_dynamic_bytes),
            o(self.instructions),
            top.join(", ")
        )
    }
}

/// Differences after - before of every number both sides have.
pub fn delta(before: &StaticMetrics, after: &StaticMetrics) -> BTreeMap<String, i64> {
    let mut d = BTreeMap::new();
    let mut put = |name: &str, a: Option<i64>, b: Option<i64>| {
        if let (Some(a), Some(b)) = (a, b) {
            d.insert(name.to_string(), b - a);
        }
    };
    put("registers", before.registers, after.registers);
    put("spill_store_bytes", before.spill_store_bytes, after.spill_store_bytes);
    put("spill_load_bytes", before.spill_load_bytes, after.spill_load_bytes);
    put("shared_static_bytes", before.shared_static_bytes, after.shared_static_bytes);
    put("shared_dynamic_bytes", before.shared_dynamic_bytes, after.shared_dynamic_bytes);
    put("instructions", before.instructions, after.instructions);
    if before.by_class.is_empty() || after.by_class.is_empty() {
        return d;
    }
    let classes: std::collections::BTreeSet<&String> = before.by_class.keys().chain(after.by_class.keys()).collect();
    for c in classes {
        let (a, b) = (before.by_class.get(c).copied().unwrap_or(0), after.by_class.get(c).copied().unwrap_or(0));
        if a != b {
            d.insert(format!("class.{c}"), b - a);
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_compile_json_and_diffs_it() {
        let before = serde_json::json!({
            "arch": "sm_90a",
            "resources": {"registers": 255, "spill_store_bytes": 2008, "spill_load_bytes": 2572, "stack_bytes": 1976,
                          "local_bytes": 0, "shared_static_bytes": 1024, "shared_dynamic_bytes": 122880},
            "instructions": {"total": 6960, "by_class": {"fp32": 2712, "tensor": 104}, "by_opcode": {"HGMMA": 104}},
            "triton": {"compile_seconds": 1.1}
        });
        let mut after = before.clone();
        after["resources"]["registers"] = serde_json::json!(240);
        after["instructions"]["by_class"]["tensor"] = serde_json::json!(0);
        after["instructions"]["by_class"]["fp32"] = serde_json::json!(9000);
        let (b, a) = (StaticMetrics::from_compile_json(&before), StaticMetrics::from_compile_json(&after));
        assert_eq!(b.registers, Some(255));
        assert_eq!(b.by_class["tensor"], 104);
        assert!(b.summary().starts_with("regs 255, spills 2008/2572 B, smem 1024+122880 B, 6960 instr (fp32 2712"));
        let d = delta(&b, &a);
        assert_eq!(d["registers"], -15);
        assert_eq!(d["class.tensor"], -104);
        assert_eq!(d["spill_store_bytes"], 0);
        // missing numbers are None, never a panic
        let empty = StaticMetrics::from_compile_json(&serde_json::json!({"status": "error"}));
        assert_eq!(empty.registers, None);
        assert!(delta(&empty, &a).is_empty());
    }
}
