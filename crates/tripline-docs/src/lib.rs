//! Every snippet of the READMEs and of the porting guide, compiled (and, but for those that
//! need a Redis server, run) as doc tests: `cargo test -p tripline-docs --doc`. The TOML
//! snippets are parsed by `tests/toml_snippets.rs`. Nothing here is published.

#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
mod readme {}

#[cfg(doctest)]
#[doc = include_str!("../../tripline/README.md")]
mod tripline_readme {}

#[cfg(doctest)]
#[doc = include_str!("../../tripline-policies/README.md")]
mod policies_readme {}

#[cfg(doctest)]
#[doc = include_str!("../../tripline-redis/README.md")]
mod redis_readme {}

#[cfg(doctest)]
#[doc = include_str!("../../tripline-dashboard/README.md")]
mod dashboard_readme {}

#[cfg(doctest)]
#[doc = include_str!("../../../docs/porting.md")]
mod porting {}
