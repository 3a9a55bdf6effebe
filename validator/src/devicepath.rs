//! A CUDA kernel's CPU checks run its emulation: the source compiled by the
//! host's C++ compiler with NVRTC's device macros defined (`__CUDA_ARCH__`,
//! `__CUDACC__`, `__CUDACC_RTC__`; kernels/harness/cuda/emulation.py). Every
//! other predefined macro differs between the two compilers (`__x86_64__`,
//! `__GNUC__`, `__linux__`, `__SSE2__` are the host's; NVRTC's own are not
//! the host's), so a preprocessor condition on one of them picks code that
//! the emulation runs and the device never compiles, or the reverse. What a
//! candidate adds there is refused at static: a condition may name only the
//! device-path macros and macros the file itself defines.

use std::collections::HashSet;

/// Macros NVRTC and the emulation both define, to the same values.
const DEVICE_PATH_MACROS: &[&str] = &["__CUDA_ARCH__", "__CUDACC__", "__CUDACC_RTC__"];

/// A preprocessor condition on a macro the two paths define differently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finding {
    /// The macro.
    pub(crate) name: String,
    /// 1-based line of the directive.
    pub(crate) line: usize,
}

/// Conditions in `cand` on macros that the emulation and NVRTC define
/// differently, other than those `base` already has (the trusted kernel's).
pub(crate) fn added_platform_conditions(base: &str, cand: &str) -> Vec<Finding> {
    let known: HashSet<String> = findings(base).into_iter().map(|f| f.name).collect();
    findings(cand).into_iter().filter(|f| !known.contains(&f.name)).collect()
}

/// What a CUDA candidate adds that would run before the check or keep state
/// from one launch to the next, which no check of single launches sees: a
/// `static` variable in a function (it lives with the module), and a
/// constructor or destructor attribute or an init section (native code run
/// when the emulation's library loads, before any case). `Err` when a side
/// does not parse (the syntax gate's business).
pub(crate) fn added_persistent_state(base: &str, cand: &str) -> Result<Vec<Finding>, String> {
    let known: HashSet<String> = persistent_state(base)?.into_iter().map(|f| f.name).collect();
    Ok(persistent_state(cand)?.into_iter().filter(|f| !known.contains(&f.name)).collect())
}

/// Load-time hooks, by the text that names them.
const LOAD_HOOKS: &[&str] = &["constructor", "destructor", ".init_array", ".fini_array", ".ctors", ".dtors"];

pub(crate) fn persistent_state(text: &str) -> Result<Vec<Finding>, String> {
    let tree = kidiom_syntax::parse_tree(kidiom_syntax::Lang::Cuda, text)
        .map_err(|e| format!("{e:?}"))?
        .ok_or_else(|| "the file does not parse".to_string())?;
    let mut out = Vec::new();
    kidiom_syntax::preorder(tree.root_node(), |node| {
        let src = text.get(node.byte_range()).unwrap_or_default();
        let line = node.start_position().row + 1;
        match node.kind() {
            "declaration" if in_function(node) && is_static_variable(node, text) => {
                let decl = src.split(['=', ';', '{']).next().unwrap_or(src).split_whitespace().collect::<Vec<_>>();
                out.push(Finding { name: format!("`{}` (state kept across launches)", decl.join(" ")), line });
                false
            }
            "attribute_specifier" | "attribute_declaration" | "attribute" => {
                if let Some(hook) = LOAD_HOOKS.iter().find(|h| src.contains(*h)) {
                    out.push(Finding { name: format!("`{hook}` (native code run when the library loads)"), line });
                }
                false
            }
            _ => true,
        }
    });
    Ok(out)
}

/// Whether `node` sits in a function's body.
fn in_function(node: tree_sitter::Node) -> bool {
    let mut p = node.parent();
    while let Some(n) = p {
        if n.kind() == "compound_statement" {
            return true;
        }
        p = n.parent();
    }
    false
}

/// A `static` (or `thread_local`) declaration of a variable that can change.
fn is_static_variable(node: tree_sitter::Node, text: &str) -> bool {
    variable_storage(node, text).is_some_and(|s| s.iter().any(|c| c == "static" || c == "thread_local"))
}

/// The storage classes of a declaration of a variable that can change (not
/// `const` or `constexpr`, nor a function's prototype); `None` for any other
/// declaration.
pub(crate) fn variable_storage(node: tree_sitter::Node, text: &str) -> Option<Vec<String>> {
    let mut cursor = node.walk();
    let mut storage = Vec::new();
    for child in node.children(&mut cursor) {
        let t = text.get(child.byte_range()).unwrap_or_default();
        match child.kind() {
            "storage_class_specifier" => storage.push(t.to_string()),
            "type_qualifier" if t == "const" || t == "constexpr" => return None,
            _ => {}
        }
    }
    let mut decl = node.child_by_field_name("declarator");
    while let Some(d) = decl {
        if d.kind() == "function_declarator" {
            return None;
        }
        decl = d.child_by_field_name("declarator");
    }
    let constexpr = text.get(node.byte_range()).unwrap_or_default().split_whitespace().any(|w| w == "constexpr");
    (!constexpr).then_some(storage)
}

/// The directives of `text`, continuation lines joined: (line, directive, rest).
fn directives(text: &str) -> Vec<(usize, String, String)> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((i, line)) = lines.next() {
        let Some(rest) = line.trim_start().strip_prefix('#') else { continue };
        let mut joined = rest.to_string();
        while joined.ends_with('\\') {
            joined.pop();
            match lines.next() {
                Some((_, next)) => joined.push_str(next),
                None => break,
            }
        }
        let joined = strip_comments(&joined);
        let body = joined.trim_start();
        let word: String = body.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        out.push((i + 1, word.clone(), body[word.len()..].to_string()));
    }
    out
}

fn strip_comments(s: &str) -> String {
    let mut out = s.to_string();
    if let Some(i) = out.find("//") {
        out.truncate(i);
    }
    while let (Some(a), Some(b)) = (out.find("/*"), out.find("*/")) {
        if b < a {
            break;
        }
        out.replace_range(a..b + 2, " ");
    }
    out
}

/// Every macro a condition of `text` names that is neither a device-path
/// macro nor one the file `#define`s.
fn findings(text: &str) -> Vec<Finding> {
    let all = directives(text);
    let defined: HashSet<String> = all
        .iter()
        .filter(|(_, d, _)| d == "define")
        .filter_map(|(_, _, rest)| identifiers(rest).into_iter().next())
        .collect();
    let mut out = Vec::new();
    for (line, directive, rest) in &all {
        if !matches!(directive.as_str(), "if" | "ifdef" | "ifndef" | "elif" | "elifdef" | "elifndef") {
            continue;
        }
        for name in identifiers(rest) {
            if name == "defined" || name == "__has_include" || DEVICE_PATH_MACROS.contains(&name.as_str()) {
                continue;
            }
            if !defined.contains(&name) && !out.iter().any(|f: &Finding| f.name == name && f.line == *line) {
                out.push(Finding { name, line: *line });
            }
        }
    }
    out
}

/// The identifiers of a directive's text (numbers and character literals skipped).
fn identifiers(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c == '\'' || c == '"' {
            // a literal: skip to its end
            for (_, d) in chars.by_ref() {
                if d == c {
                    break;
                }
            }
        } else if c.is_ascii_digit() {
            while chars.peek().is_some_and(|(_, d)| d.is_ascii_alphanumeric() || *d == '_' || *d == '.') {
                chars.next();
            }
        } else if c.is_ascii_alphabetic() || c == '_' {
            let mut end = i + c.len_utf8();
            while let Some((j, d)) = chars.peek().copied() {
                if d.is_ascii_alphanumeric() || d == '_' {
                    end = j + d.len_utf8();
                    chars.next();
                } else {
                    break;
                }
            }
            out.push(s[i..end].to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "#include <cuda_runtime.h>\n#ifndef KDA_H\n#define KDA_H\n#define BLOCK 128\n\
        #if BLOCK > 64 && defined(__CUDA_ARCH__)\n__global__ void k() {}\n#endif\n#endif\n";

    #[test]
    fn device_path_macros_and_the_files_own_pass() {
        assert!(findings(BASE).is_empty(), "{:?}", findings(BASE));
    }

    #[test]
    fn a_condition_on_a_hosts_macro_is_found_with_its_line() {
        let cand = BASE.replace(
            "__global__ void k() {}\n",
            "#if defined(__x86_64__) || \\\n    __GNUC__ >= 12 // the host\n__global__ void k() {}\n#endif\n",
        );
        let found = added_platform_conditions(BASE, &cand);
        assert_eq!(
            found,
            vec![Finding { name: "__x86_64__".into(), line: 6 }, Finding { name: "__GNUC__".into(), line: 6 }]
        );
    }

    #[test]
    fn what_the_baseline_already_has_is_its_own() {
        let base = format!("#ifdef __linux__\n#endif\n{BASE}");
        let cand = format!("#ifdef __linux__\n#endif\n#ifndef __linux__\n#endif\n{BASE}");
        assert!(added_platform_conditions(&base, &cand).is_empty());
        let cand = format!("{base}#ifdef __NVCC__\n#endif\n");
        assert_eq!(added_platform_conditions(&base, &cand)[0].name, "__NVCC__");
    }

    const KERNEL: &str = "extern \"C\" __global__ void k(float* o) {\n    static const int table = 4;\n    \
        o[0] = table;\n}\n__device__ static float helper(float x);\n";

    #[test]
    fn a_static_local_is_state_kept_across_launches() {
        assert!(added_persistent_state(KERNEL, KERNEL).unwrap().is_empty());
        let cand =
            KERNEL.replace("    o[0] = table;", "    static int calls = 0;\n    calls++;\n    o[0] = table + calls;");
        let found = added_persistent_state(KERNEL, &cand).unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].line, 3);
        assert!(found[0].name.starts_with("`static int calls`"), "{}", found[0].name);
    }

    #[test]
    fn a_load_time_hook_is_native_code_before_the_check() {
        let cand = format!("{KERNEL}__attribute__((constructor)) __device__ void early() {{}}\n");
        let found = added_persistent_state(KERNEL, &cand).unwrap();
        assert!(found.iter().any(|f| f.name.contains("`constructor`") && f.line == 6), "{found:?}");
    }

    #[test]
    fn comments_numbers_and_literals_are_not_macros() {
        let text = "#if 0x10 > 1 /* __x86_64__ */ && __has_include(\"x.h\")\n#endif\n#elifdef __SSE2__\n";
        let names: Vec<String> = findings(text).into_iter().map(|f| f.name).collect();
        assert_eq!(names, vec!["__SSE2__".to_string()]);
    }
}
