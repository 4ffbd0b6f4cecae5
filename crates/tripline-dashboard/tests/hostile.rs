//! Hostile requests through the dashboard's router, on stable in every CI run: structured
//! requests (paths, query strings and control bodies, hostile in every part) and arbitrary
//! bytes as a control body, 10,000 cases each, checked for what must hold
//! (`hostile/checks.rs`, which the fuzz target in `fuzz/` shares), and the inputs the fuzzer
//! found, each as a named test.

#[path = "hostile/checks.rs"]
mod checks;

use arbitrary::Unstructured;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, ..ProptestConfig::default() })]

    #[test]
    fn no_request_gets_a_server_error_or_changes_a_breaker_it_should_not(
        data in proptest::collection::vec(any::<u8>(), 0..200),
        authorized in any::<bool>(),
    ) {
        if let Ok(h) = checks::Hostile::arbitrary(&mut Unstructured::new(&data)) {
            checks::request(&h, authorized);
        }
    }
}
