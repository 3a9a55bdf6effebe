//! The tree-sitter grammars: one [`Language`] per language, built once and
//! shared by the parsers ([`crate::parse_tree`]) and history mining, and the
//! facts about node kinds that more than one module needs (which kinds
//! anchor an edit, which are atoms, the keyword-argument kind).

use std::sync::OnceLock;

use tree_sitter::Language;

use crate::lang::Lang;

/// The grammar of `lang`; `None` for Rust, which has no tree-sitter grammar here.
pub fn language(lang: Lang) -> Option<&'static Language> {
    static PY: OnceLock<Language> = OnceLock::new();
    static CU: OnceLock<Language> = OnceLock::new();
    static CPP: OnceLock<Language> = OnceLock::new();
    match lang {
        Lang::Python => Some(PY.get_or_init(|| tree_sitter_python::LANGUAGE.into())),
        Lang::Cuda => Some(CU.get_or_init(|| tree_sitter_cuda::LANGUAGE.into())),
        Lang::Cpp => Some(CPP.get_or_init(|| tree_sitter_cpp::LANGUAGE.into())),
        Lang::Rust => None,
    }
}

/// The name of node kind `kind` in `lang`'s grammar (`""` when unknown).
pub fn kind_name(lang: Lang, kind: u16) -> &'static str {
    language(lang).and_then(|l| l.node_kind_for_id(kind)).unwrap_or("")
}

/// How many node kinds `lang`'s grammar has (0 without one): part of the
/// history cache's fingerprint, since kind ids change with the grammar.
pub fn kind_count(lang: Lang) -> usize {
    language(lang).map_or(0, |l| l.node_kind_count())
}

/// Kinds that give an edit enough context to be applied elsewhere.
pub fn is_anchor(lang: Lang, kind: &str) -> bool {
    match lang {
        Lang::Python => {
            matches!(
                kind,
                "call"
                    | "decorator"
                    | "typed_parameter"
                    | "typed_default_parameter"
                    | "default_parameter"
                    | "assignment"
                    | "augmented_assignment"
                    | "function_definition"
                    | "class_definition"
            ) || kind.ends_with("_statement")
        }
        Lang::Cuda | Lang::Cpp => {
            kind == "call_expression"
                || kind == "init_declarator"
                || kind.ends_with("_statement")
                || kind.ends_with("declaration")
                || kind.ends_with("_definition")
                || kind.starts_with("preproc_")
        }
        Lang::Rust => false,
    }
}

/// Python's `keyword_argument` kind (`u16::MAX` when the grammar lacks it).
pub fn keyword_argument_kind() -> u16 {
    static KW: OnceLock<u16> = OnceLock::new();
    *KW.get_or_init(|| language(Lang::Python).map_or(u16::MAX, |l| l.id_for_node_kind("keyword_argument", true)))
}

/// String and character literal kinds of every tree-sitter language: atoms
/// that generalization never descends into (a hole inside a string token
/// is no pattern).
pub fn atom_kinds() -> &'static [u16] {
    static ATOMS: OnceLock<Vec<u16>> = OnceLock::new();
    ATOMS.get_or_init(|| {
        let mut out = Vec::new();
        for lang in [Lang::Python, Lang::Cuda, Lang::Cpp] {
            let Some(l) = language(lang) else { continue };
            for name in ["string", "concatenated_string", "string_literal", "raw_string_literal", "char_literal"] {
                let id = l.id_for_node_kind(name, true);
                if id != 0 {
                    out.push(id);
                }
            }
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tree_sitter_language_has_kinds_and_python_keywords_are_known() {
        for lang in [Lang::Python, Lang::Cuda, Lang::Cpp] {
            assert!(kind_count(lang) > 0, "{lang}");
        }
        assert_eq!(kind_count(Lang::Rust), 0);
        assert_eq!(kind_name(Lang::Python, keyword_argument_kind()), "keyword_argument");
        assert!(!atom_kinds().is_empty());
        assert!(is_anchor(Lang::Python, "return_statement") && !is_anchor(Lang::Python, "argument_list"));
        assert!(is_anchor(Lang::Cuda, "call_expression") && !is_anchor(Lang::Cuda, "identifier"));
    }
}
