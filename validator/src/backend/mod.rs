//! Where gates run: the Python harness as a subprocess with a deadline
//! ([`python`]; it also times CUDA kernels, in its own process), or as
//! tasks on a Ray cluster ([`fleet`], through `kidiom_exec::Fleet`), and
//! the static metrics of its ahead-of-time compiles ([`cpu`]).

pub mod cpu;
pub mod fleet;
pub mod python;
