//! Static metrics without a GPU: the harness's ahead-of-time `compile`
//! (Triton for sm_90, or NVRTC + ptxas), read into numbers that can be
//! compared before and after a rewrite.

use std::collections::BTreeMap;

/// What the compiler says about one kernel build: the stored record's
/// compile figures ([`kidiom_patterns::record::CompileFigures`]).
pub use kidiom_patterns::record::CompileFigures as StaticMetrics;

/// Reading a compile's figures from the harness.
pub(crate) trait ReadCompile: Sized {
    /// Reads the `compile` command's JSON (wire format v1); what does not
    /// fit is left out (the gates read it strictly, through the wire types).
    #[cfg(test)]
    fn from_compile_json(v: &serde_json::Value) -> Self;

    /// From the typed `compile` reply.
    fn from_wire(c: &crate::wire::Compile) -> Self;
}

impl ReadCompile for StaticMetrics {
    #[cfg(test)]
    fn from_compile_json(v: &serde_json::Value) -> StaticMetrics {
        serde_json::from_value::<crate::wire::Compile>(v.clone())
            .map(|c| StaticMetrics::from_wire(&c))
            .unwrap_or_default()
    }

    fn from_wire(c: &crate::wire::Compile) -> StaticMetrics {
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
