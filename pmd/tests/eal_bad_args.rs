//! A failed EAL initialisation returns DPDK's reason instead of exiting the process, and the
//! EAL refuses a second attempt with an error (DPDK cannot retry). Own file: it needs a
//! process whose EAL was never initialised.

use tigon_pmd::{Eal, Error};

#[test]
fn bad_eal_argument_is_an_error_and_the_process_survives() {
    let err = Eal::builder()
        .file_prefix(format!("tt-bad-{}", std::process::id()))
        .in_memory(true)
        .arg("--no-such-eal-option")
        .init()
        .expect_err("unknown option must fail");
    println!("bad option: {err}");
    match &err {
        Error::EalInit { errno, args, .. } => {
            assert_eq!(*errno, libc::EINVAL);
            assert!(args.iter().any(|a| a == "--no-such-eal-option"));
        }
        e => panic!("unexpected error {e:?}"),
    }
    assert!(err.to_string().contains("DPDK EAL initialisation failed"));
    assert!(Eal::init_attempted());
    let again = Eal::builder()
        .in_memory(true)
        .init()
        .expect_err("second attempt");
    assert!(matches!(again, Error::EalAlreadyInitialized), "{again:?}");
    println!("second attempt: {again}");
}
