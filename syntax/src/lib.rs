//! The syntax layer under every kidiom crate: which language a file is,
//! parsing it with tree-sitter, and where its kernels are.
//!
//! # Brief overview
//!
//! [`Lang`] says how a path is read. [`decode`] turns bytes into text or a
//! [`Skip`] (binary, too large, too deep) before any parser sees them, and
//! [`parse_tree`] parses with one cached parser per language and thread
//! ([`reparse`] re-parses incrementally after edits). [`kernel_ranges`]
//! finds the kernels of a parsed file: Triton kernels through the file's
//! own import aliases ([`ImportAliases`]), CUDA `__global__`/`__device__`
//! functions also through device macros ([`DeviceMacros`]), and host
//! functions of binding files; [`kernel_launches`] the launches
//! `KERNEL[GRID](...)` of Triton kernels in a Python file's host code.
//! [`blob_id`] names content as git does, and
//! [`tree_files`] is the one directory walk.
//!
//! ```
//! use kidiom_syntax::{KernelKind, Lang, kernel_ranges, parse_tree};
//!
//! let src = "import triton as tr\n\n@tr.jit\ndef k(x):\n    pass\n\ndef host():\n    pass\n";
//! let tree = parse_tree(Lang::Python, src).unwrap().expect("Python has a grammar");
//! let kernels = kernel_ranges(Lang::Python, src, &tree);
//! assert_eq!(kernels.len(), 1);
//! assert_eq!(kernels[0].kind, KernelKind::Triton);
//! assert!(src[kernels[0].range.clone()].starts_with("@tr.jit\ndef k"));
//! ```
//!
//! Nothing here opens a repository, runs a process or knows about mining:
//! Rust files, which the miner reads with syn, have no tree here.
#![deny(missing_docs)]

mod blob;
mod device;
mod error;
pub mod grammar;
mod kernels;
mod lang;
mod launch;
mod parse;
mod triton;
mod walk;

pub use blob::blob_id;
pub use device::{
    DEVICE_WORDS, DeviceMacros, KNOWN_DEVICE_MACROS, known_device_macros, merge_device_macro, scan_device_macros,
};
pub use error::{Error, Result};
pub use kernels::{KernelKind, KernelRange, kernel_ranges};
pub use lang::Lang;
pub use launch::{LAUNCH_OPTIONS, Launch, Launched, kernel_launches};
pub use parse::{Limits, Skip, decode, parse_tree, preorder, reparse};
pub use triton::{ImportAliases, is_triton_kernel_decorator};
pub use walk::tree_files;
